"""Execute docs/notebooks.ipynb in a fresh kernel (nbclient, ipykernel, JAX on
the CPU) in a temporary directory, print each code cell's text output (what
docs/notebooks.md shows), and write docs/img/notebook-cell.png: the
``%%jaxmemprof`` cell's output as a notebook shows it, in headless Chromium:

    python docs/img/make_notebook_screenshot.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from _browser import Browser  # noqa: E402

OUT = REPO / "docs" / "img" / "notebook-cell.png"


def execute(tmp: Path):
    spec = tmp / "kernels" / "k"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "k", "language": "python", "env": {"JAX_PLATFORMS": "cpu"}}))
    km = KernelManager(kernel_name="k", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp / "kernels")]))
    nb = nbformat.read(REPO / "docs" / "notebooks.ipynb", as_version=4)
    work = tmp / "work"
    work.mkdir()
    NotebookClient(nb, km=km, timeout=300, resources={"metadata": {"path": str(work)}}).execute()
    return nb


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        nb = execute(Path(tmp))
        cell_html = None
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            print(f"In [{cell.execution_count}]:\n{cell.source}\n")
            for o in cell.outputs:
                if o.output_type == "stream":
                    print(o.text.rstrip("\n"))
                elif "data" in o:
                    print(o["data"].get("text/plain", "").rstrip("\n"))
                    if cell.source.startswith("%%jaxmemprof") and "text/html" in o["data"]:
                        cell_html = o["data"]["text/html"]
            print("-" * 40)
        page = Path(tmp) / "cell.html"
        page.write_text(f"<!DOCTYPE html><html><body style=\"margin:12px\">{cell_html}</body></html>", encoding="utf-8")
        with Browser(width=1100, height=980) as b:
            p = b.open(page)
            with b._lock:
                since = len(b._events)
            b.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True},
                   p.session)
            frame = b.wait_event("Target.attachedToTarget", p.session, since)["params"]["sessionId"]
            for _ in range(100):
                ask = {"expression": "document.documentElement.getAttribute('data-jmp-ready')", "returnByValue": True}
                if b.send("Runtime.evaluate", ask, frame)["result"].get("value"):
                    break
                time.sleep(0.05)
            assert not p.errors, p.errors
            p.screenshot(OUT)
            print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
