"""Regenerate the screenshots of docs/html.md from the bundled run
sample_runs/runs/mlp-leak, in headless Chromium:

    python docs/img/make_screenshots.py
"""

from __future__ import annotations

import base64
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from _browser import Browser  # noqa: E402

OUT = REPO / "docs" / "img"
SHOTS = {  # file -> the sections it shows (from the first one's top to the last one's bottom)
    "html-report-top.png": ("#jmp > header", "#timeline"),
    "html-flame.png": ("#flame", "#diff"),
    "html-more.png": ("#jit", "#findings"),
}


def clip(page, first: str, last: str) -> dict:
    box = page.evaluate(f"""(() => {{
        const a = document.querySelector({first!r}).getBoundingClientRect();
        const b = document.querySelector({last!r}).getBoundingClientRect();
        return [a.top + window.scrollY, b.bottom + window.scrollY]; }})()""")
    return {"x": 0, "y": max(0, box[0] - 8), "width": page.browser.width, "height": box[1] - box[0] + 16, "scale": 1}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "report.html"
        subprocess.run([sys.executable, "-m", "jaxmemprof", "report", "sample_runs/runs/mlp-leak", "--html", str(html)],
                       cwd=REPO, check=True)
        with Browser(width=1200, height=900) as b:
            page = b.open(html)
            assert not page.errors, page.errors
            for name, (first, last) in SHOTS.items():
                data = b.send("Page.captureScreenshot", {"format": "png", "clip": clip(page, first, last),
                                                         "captureBeyondViewport": True}, page.session)["data"]
                (OUT / name).write_bytes(base64.b64decode(data))
                print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
