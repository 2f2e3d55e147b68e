"""The one module that imports circuitsvis: attention views that open with no network.

circuitsvis's `str()` / `show_code()` import its JavaScript from a CDN (blank offline), and its
`RenderedHTML.local_src` inlines the whole ~1.3 MB bundle into every view; in a notebook its
`_repr_html_` even probes the network first to choose. Here the bundle goes into a page once, as a
classic script that defines the global `CircuitsVis`, and each pattern of a view is a div plus one
call into the bundle's `render` with its props. Nothing is loaded from anywhere.
"""

from __future__ import annotations

import functools
import html
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import circuitsvis
from jaxtyping import Float
from torch import Tensor


@functools.lru_cache(maxsize=1)
def bundle_js() -> str:
    """circuitsvis's browser bundle (an IIFE defining `CircuitsVis`), safe to inline in a <script>."""
    path = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"
    js = path.read_text(encoding="utf-8")
    # A source-map comment makes devtools fetch iife.js.map; a literal "</script" inside the bundle
    # (one, in a string) would end the inline script early. "<\/script" is the same string in JS.
    js = re.sub(r"//# sourceMappingURL=\S+\s*$", "", js)
    return re.sub(r"</(script)", r"<\\/\1", js, flags=re.IGNORECASE)


def bundle_script() -> str:
    return f'<script data-mechsynth="circuitsvis-{circuitsvis.__version__}">\n{bundle_js()}\n</script>'


def _json_for_script(obj) -> str:
    """JSON inside a <script>: "</" and "<!--" must not appear literally."""
    return json.dumps(obj, allow_nan=False).replace("</", "<\\/").replace("<!--", "<\\!--")


@dataclass
class AttentionView:
    """Attention patterns over one token sequence, side by side in a grid (`columns` per row, e.g.
    checkpoints before, while and after a head forms), each a circuitsvis `AttentionPattern`: a
    heatmap with the token labels on both axes and each cell's tokens and value on hover."""

    title: str
    tokens: list[str]
    patterns: Float[Tensor, "pattern query_pos key_pos"]
    names: list[str]  # one per pattern, e.g. "L1H0 step 167 (forms)"
    columns: int = 3

    def __post_init__(self):
        n, q, k = self.patterns.shape
        if n != len(self.names) or q != k or k != len(self.tokens):
            raise ValueError(
                f"patterns {tuple(self.patterns.shape)} do not match {len(self.names)} names "
                f"and {len(self.tokens)} tokens"
            )

    def props(self, i: int) -> dict:
        return {
            "attention": [[round(float(v), 4) for v in row] for row in self.patterns[i].tolist()],
            "tokens": list(self.tokens),
            "maxValue": 1.0,
            "minValue": 0.0,
            "maskUpperTri": True,
            "showAxisLabels": True,
        }

    def html(self, div_id: str) -> str:
        """The view's divs and the calls that render into them; the page must contain `bundle_script()` first."""
        cells = "".join(
            f'<div class="cv-cell"><div class="cv-name" style="text-align:center;font-size:0.85em">{html.escape(name)}</div>'
            f'<div class="cv-root" id="{div_id}-{i}"></div>'
            f"<script>CircuitsVis.render({json.dumps(f'{div_id}-{i}')}, CircuitsVis.AttentionPattern, "
            f"{_json_for_script(self.props(i))});</script></div>"
            for i, name in enumerate(self.names)
        )
        grid = f"display:grid;grid-template-columns:repeat({max(1, min(self.columns, len(self.names)))},minmax(0,1fr));gap:12px"
        return (
            f'<figure class="cv-view" style="margin:1em 0 2em"><figcaption style="font-weight:600">'
            f'{html.escape(self.title)}</figcaption><div style="{grid}">{cells}</div></figure>'
        )


def views_html(views: Sequence[AttentionView], prefix: str = "cv") -> str:
    """The bundle once, then every view: a fragment for a page, a notebook cell or W&B."""
    return bundle_script() + "\n".join(v.html(f"{prefix}-{i}") for i, v in enumerate(views))


def page(title: str, body: str, style: str = "") -> str:
    """A complete HTML document with no external resources."""
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{style}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


class Shown:
    """Views for a notebook: `_repr_html_` gives the bundle and the views, nothing from the network
    (unlike circuitsvis's own, which first tries to reach a web site)."""

    def __init__(self, views: Sequence[AttentionView]):
        self.views = list(views)
        self.prefix = f"cv{uuid.uuid4().hex[:12]}"  # div ids unique across cells and kernel restarts

    def _repr_html_(self) -> str:
        return views_html(self.views, self.prefix)


def show(views: AttentionView | Sequence[AttentionView]) -> Shown:
    """Display attention views inline in Jupyter: `views.show(view)` as a cell's last line."""
    return Shown([views] if isinstance(views, AttentionView) else views)


# circuitsvis's own HTML (`str(view)`, RenderedHTML.cdn_src): a module script that imports `render` and the
# component from unpkg, so a user's saved page is blank offline. Group 1: the names it imports.
_CDN_IMPORT = re.compile(r'import\s*\{([^}]*)\}\s*from\s*["\']https?://[^"\']*circuitsvis[^"\']*["\'];?')


def offline_html(view: object, title: str = "circuitsvis") -> str:
    """A complete page of a circuitsvis view (what `circuitsvis.attention.attention_patterns(...)` and the
    like return, or its `str()`) that opens with no network: the bundled JavaScript inlined once, as the
    report does, in place of circuitsvis's import from unpkg."""
    source = getattr(view, "cdn_src", view)  # RenderedHTML's str() is its cdn_src
    if not isinstance(source, str) or not _CDN_IMPORT.search(source):
        raise ValueError(
            f"view: expected a circuitsvis view or its HTML (str(view)), got {type(view).__name__} "
            "without circuitsvis's import"
        )
    # The bundle (a classic script) runs before any module script, so the names are on `CircuitsVis` by then.
    body = _CDN_IMPORT.sub(lambda m: f"const {{{m.group(1)}}} = CircuitsVis;", source)
    return page(title, bundle_script() + "\n" + body)


def save_html(view: object, path: Path | str, title: str = "circuitsvis") -> Path:
    """Write `offline_html(view)` to `path` (a file that opens offline, from disk or as a W&B Html); returns it."""
    out = Path(path)
    out.write_text(offline_html(view, title), encoding="utf-8")
    return out
