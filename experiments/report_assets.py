"""Screenshots of a run's report (needs Chromium) and its key figures, as shown in the docs (the report page).

python -m experiments.report_assets RUN_DIR [OUT_DIR] [--figures-only]     (default OUT_DIR: assets)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from mechsynth.analysis import report
from mechsynth.util import browser


def main(run_dir: str, out: str = "assets", figures_only: bool = False) -> None:
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rep = report.write(run_dir)
    written = []
    if not figures_only:
        opened = browser.open_page(rep.path, width=1100, height=1900, screenshot=out_dir / "report.png")
        if opened.requests:
            raise SystemExit(f"the report asked the network for {opened.requests}")
        with tempfile.TemporaryDirectory() as tmp:  # the renders alone: a screenshot shows the top of a page
            page = Path(tmp) / "attention.html"
            page.write_text(report.attention_page(rep), encoding="utf-8")
            browser.open_page(page, width=1100, height=1250, screenshot=out_dir / "report_attention.png")
        written += [out_dir / "report.png", out_dir / "report_attention.png"]
    for name in ("timelines", "strategy_kl", "linear_probes", "hidden_progress"):
        if name in rep.figures:
            rep.figures[name].savefig(out_dir / f"report_{name}.png", dpi=110)
            written.append(out_dir / f"report_{name}.png")
    print("\n".join(map(str, written)))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--figures-only"]
    main(*args, figures_only="--figures-only" in sys.argv)
