"""Open a local HTML file in headless Chromium, as a person's browser would: the DOM after scripts ran,
a screenshot, and every network request the page made (from Chromium's own net log).

Used to check that a report renders and asks for nothing over the network, and to take the
screenshots in the docs. Chromium is Debian's `chromium` package; nothing here downloads a browser.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# Chromium's own services off (sync, component updates, QUIC): on a machine without network their lookups
# can stall a --screenshot run for minutes (seen here: 1 in 6 loads of a page that asks the network).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
NETWORK_SCHEMES = ("http:", "https:", "ws:", "wss:", "ftp:")


def find_chromium() -> Optional[str]:
    """The Chromium binary: $MECHSYNTH_CHROMIUM, else `chromium` / `chromium-browser` on PATH."""
    env = os.environ.get("MECHSYNTH_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)


@dataclass
class Opened:
    dom: str  # document.documentElement.outerHTML once scripts have run
    screenshot: Path  # PNG of the viewport
    requests: list[str]  # URLs the page itself asked the network for
    browser_requests: list[str]  # URLs Chromium's own services asked for (not the page's doing)


def page_requests(net_log: Path) -> tuple[list[str], list[str]]:
    """(page requests, browser requests) from a --log-net-log file. A request started on behalf of a
    document carries that document's origin as `initiator` (`null` for a file:// page); Chromium's
    own background services (time sync, component updates) log "not an origin"."""
    text = net_log.read_text(errors="replace")
    try:
        log = json.loads(text)
    except json.JSONDecodeError:  # the browser was stopped before closing the log
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    urls: dict[int, str] = {}
    initiators: dict[int, set[str]] = {}
    for event in log.get("events", []):
        params, source = event.get("params") or {}, event.get("source", {}).get("id")
        if isinstance(params.get("url"), str) and params["url"].startswith(NETWORK_SCHEMES):
            urls.setdefault(source, params["url"])
        if "initiator" in params:
            initiators.setdefault(source, set()).add(str(params["initiator"]))
    page = sorted({u for s, u in urls.items() if initiators.get(s, set()) - {"not an origin"}})
    browser = sorted(set(urls.values()) - set(page))
    return page, browser


def open_page(
    path: Path | str,
    *,
    width: int = 1280,
    height: int = 2000,
    budget_ms: int = 20000,
    screenshot: Optional[Path] = None,
    fragment: str = "",
    chromium: Optional[str] = None,
    timeout: float = 120,
) -> Opened:
    """Load `path` twice in headless Chromium (once for the DOM, once for the screenshot), letting
    scripts run for `budget_ms` of virtual time, and collect the network requests of both loads."""
    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("Chromium not found: install Debian's `chromium` package or set MECHSYNTH_CHROMIUM")
    url = Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else "")
    with tempfile.TemporaryDirectory(prefix="mechsynth-chromium-") as tmp:
        tmp_path = Path(tmp)
        shot = Path(screenshot) if screenshot else tmp_path / "screenshot.png"

        def run(name: str, extra: list[str]) -> str:
            cmd = [
                chromium,
                *FLAGS,
                f"--user-data-dir={tmp_path / ('profile-' + name)}",
                f"--log-net-log={tmp_path / (name + '.netlog.json')}",
                f"--virtual-time-budget={budget_ms}",
                f"--window-size={width},{height}",
                "--hide-scrollbars",
                *extra,
                url,
            ]
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, "HOME": str(tmp_path)}
            )  # no dotfiles in the real home
            if done.returncode != 0:
                raise RuntimeError(f"chromium exited with {done.returncode}: {done.stderr[-2000:]}")
            return done.stdout

        dom = run("dom", ["--dump-dom"])
        run("shot", [f"--screenshot={shot}"])
        requests: set[str] = set()
        background: set[str] = set()
        for name in ("dom", "shot"):
            page, browser = page_requests(tmp_path / f"{name}.netlog.json")
            requests.update(page)
            background.update(browser)
        if not screenshot:  # keep the temporary screenshot past the directory's removal
            kept = Path(tempfile.mkstemp(prefix="mechsynth-shot-", suffix=".png")[1])
            shutil.copyfile(shot, kept)
            shot = kept
    return Opened(dom, shot, sorted(requests), sorted(background))
