"""Regenerate docs/img/trace-export.png (docs/trace-export.md): the bundled MLP
recorded with ``run --xprof``, exported as a trace merged with JAX's, and
drawn by XProf's trace viewer (catapult's, from the ``xprof`` package's static
files) in headless Chromium:

    python docs/img/make_trace_screenshot.py

Needs chromium and the ``xprof`` package (``pip install xprof``); it imports
nothing of xprof's, it opens its page.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from _browser import Browser  # noqa: E402

OUT = REPO / "docs" / "img" / "trace-export.png"

DRAW = """(() => { try {
  const m = new tr.Model(); new tr.importer.Import(m).importTraces([window.TRACE]);
  for (const c of Array.from(document.body.children)) {
    if (!['TEMPLATE', 'DOM-MODULE', 'SCRIPT'].includes(c.tagName)) c.style.display = 'none'; }
  const box = document.createElement('track-view-container'); box.id = 'track_view_container';
  const view = document.createElement('tr-ui-timeline-view');
  view.track_view_container = box; Polymer.dom(view).appendChild(box); view.globalMode = true;
  view.style.height = '880px'; view.style.display = 'flex';
  Polymer.dom(document.body).appendChild(view);
  view.model = m;
  return 'ok';
} catch (e) { return 'error: ' + e; } })()"""

# The view zoomed on a few steps (the markers' slices, 3rd to 7th): the calls' ops beside the memory.
ZOOM = """(() => { try {
  const tracks = document.querySelector('tr-ui-timeline-track-view');
  const steps = Object.values(tracks.model.processes).flatMap(p => Object.values(p.threads))
    .find(t => t.name === 'steps and markers').sliceGroup.slices;
  const lo = steps[Math.min(2, steps.length - 1)].start, hi = steps[Math.min(6, steps.length - 1)].start;
  const vp = tracks.viewport, dt = new tr.ui.TimelineDisplayTransform();
  dt.set(vp.currentDisplayTransform);
  dt.xSetWorldBounds(lo - (hi - lo) * 0.1, hi + (hi - lo) * 0.1, tracks.modelTrackContainer_.canvas.clientWidth);
  vp.setDisplayTransformImmediately(dt);
  return 'ok';
} catch (e) { return 'error: ' + e; } })()"""


def viewer() -> Path:
    spec = importlib.util.find_spec("xprof")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the xprof package is not installed (pip install xprof): its trace viewer draws the picture")
    return Path(list(spec.submodule_search_locations)[0]) / "static" / "trace_viewer_index.html"


def main() -> None:
    page_path = viewer()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        run, trace = Path(tmp) / "mlp", Path(tmp) / "mlp.trace.json"
        subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "--xprof", "-o", str(run),
                        "sample_runs/train_mlp.py", "--steps", "20"], cwd=REPO, env=env, check=True)
        subprocess.run([sys.executable, "-m", "jaxmemprof", "export", str(run), "--format", "perfetto", "--top", "3",
                        "-o", str(trace)], cwd=REPO, env=env, check=True)
        with Browser(width=1400, height=900) as b:
            page = b.open(page_path)
            page.evaluate(f"window.TRACE = {json.dumps(trace.read_text())}; 1")
            got = page.evaluate(DRAW)
            assert got == "ok", got
            time.sleep(2)
            got = page.evaluate(ZOOM)
            assert got == "ok", got
            time.sleep(2)
            assert not page.errors, page.errors
            data = b.send("Page.captureScreenshot", {"format": "png"}, page.session)["data"]
    OUT.write_bytes(base64.b64decode(data))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
