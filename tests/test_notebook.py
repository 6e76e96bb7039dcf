"""The notebook extension in a real kernel: docs/notebooks.ipynb executed cell
by cell (nbclient, ipykernel), then a few cells of checks in the same kernel,
and what each cell showed asserted on.

The kernel is started from a kernel spec made here, pointing at this
interpreter (sys.executable): pip's ipykernel installs a "python3" spec that
jupyter_client runs with the current interpreter, but a "python3" spec in the
user's own Jupyter directory (another Python's) would be found first.
"""

from __future__ import annotations

import html
import json
import re
import sys

import nbformat
import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from conftest import REPO, run_cli

NOTEBOOK = REPO / "docs" / "notebooks.ipynb"

# Checks run in the kernel after the notebook, each a cell (its output: one JSON line).
LIVE_BYTES = """\
import gc, json
from jaxmemprof.pprof.reader import load_profile
gc.collect()
_s = load_profile(jax.profiler.device_memory_profile()).samples
print(json.dumps(int(_s.loc[_s["kind"] != "executable", "bytes"].sum())))"""
HOLDERS = """\
import json
from jaxmemprof.notebook.history import holders
print(json.dumps([[h, json.loads(shape), only] for _, _, shape, _, _, h, _, only in holders(get_ipython(), jax)]))"""
ALIVE = """\
import json
print(json.dumps([r() is not None for r in _refs]))"""


class Kernel:
    """The notebook executed in one kernel, which stays up for more cells."""

    def __init__(self, tmp):
        spec = tmp / "kernels" / "jaxmemprof-test"
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "jaxmemprof test", "language": "python",
            # IPython's own directory (its history database, the user's config): the test's own.
            "env": {"JAX_PLATFORMS": "cpu", "COLUMNS": "", "NO_COLOR": "", "IPYTHONDIR": str(tmp / "ipython")},
        }))
        km = KernelManager(kernel_name="jaxmemprof-test",
                           kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp / "kernels")]))
        self.work = tmp / "work"
        self.work.mkdir()
        self.nb = nbformat.read(NOTEBOOK, as_version=4)
        self.client = NotebookClient(self.nb, km=km, timeout=180, resources={"metadata": {"path": str(self.work)}})

    def run(self, source: str, *, allow_errors: bool = False):
        cell = nbformat.v4.new_code_cell(source)
        self.nb.cells.append(cell)
        try:
            self.client.execute_cell(cell, len(self.nb.cells) - 1)
        except CellExecutionError:
            if not allow_errors:
                raise
        return cell

    def value(self, source: str):
        """The JSON a check cell prints."""
        return json.loads(stream(self.run(source)).strip().splitlines()[-1])


def stream(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def displayed(cell) -> str:
    """What the magic displayed (not the cell's own value, in Out)."""
    return "\n".join(o["data"]["text/plain"] for o in cell.outputs if o.output_type == "display_data")


def shown(cell, mime: str = "text/plain") -> str:
    return "\n".join(o["data"][mime] for o in cell.outputs
                     if o.output_type in ("display_data", "execute_result") and mime in o.get("data", {}))


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("notebook"))
    with k.client.setup_kernel():
        cells = [c for c in k.nb.cells if c.cell_type == "code"]
        for i, cell in enumerate(list(k.nb.cells)):
            if cell.cell_type != "code":
                continue
            if cell.source.startswith("%xdel _4"):
                # What IPython's history held, measured on both sides of the fix.
                k.live_before_fix = k.value(LIVE_BYTES)
                k.client.execute_cell(cell, i)
                k.live_after_fix = k.value(LIVE_BYTES)
            else:
                k.client.execute_cell(cell, i)
        k.cells = {c.source.splitlines()[0]: c for c in cells}
        k.checks = checks(k)
    return k


def checks(k: Kernel) -> dict:
    """More cells in the same kernel: what the output history's holders
    say of values held elsewhere too, against what Python then frees."""
    out = {}
    k.run("kept = jnp.full((300,), 1.0)\nkept")
    k.run("(jnp.full((400,), 2.0), kept)")
    k.run('{"w": jnp.full((500,), 3.0), "b": [jnp.full((600,), 4.0), None]}')
    first = k.nb.cells[-3].execution_count
    out["first"] = first
    out["holders"] = k.value(HOLDERS)
    k.run("import weakref\n"
          f"_refs = [weakref.ref(kept), weakref.ref(Out[{first + 1}][0]), weakref.ref(Out[{first + 2}]['w']), "
          f"weakref.ref(Out[{first + 2}]['b'][0])]")
    # (%xdel of Out[first] would delete `kept` too: it drops every name of the object.)
    k.run(f"%xdel _{first + 1}\n%xdel _{first + 2}")
    out["alive"] = k.value(ALIVE)
    out["failed"] = k.run("%%jaxmemprof -o runs/fails --force --no-page\nx.sum()\n1 / 0", allow_errors=True)
    out["quiet"] = k.run("%%jaxmemprof -o runs/quiet --force --no-page\nq = jnp.full((700,), 5.0)\nq.sum();")
    out["quiet_in_out"] = k.value(f"import json\nprint(json.dumps({out['quiet'].execution_count} in Out))")
    # A function jitted during one run is observed in the next.
    k.run("%%jaxmemprof -o runs/jits --force --no-page\ntwice = jax.jit(lambda a: a * 2)\ntwice(x);")
    k.run("%%jaxmemprof -o runs/jitted --force --no-page\ntwice(x);")
    k.run("import asyncio")
    out["awaits"] = k.run("%%jaxmemprof --no-page\nawait asyncio.sleep(0)", allow_errors=True)
    out["ipython"] = k.value("import IPython, json\nprint(json.dumps(IPython.__version__))")
    # Numbering: a recorded cell's value, the plain cell after it, a recorded cell that raises.
    out["kept"] = k.run("%%jaxmemprof -o runs/kept --force --no-page\nsquare = None\njnp.full((512, 512), 7.0)")
    n = out["kept"].execution_count
    out["next_plain"] = k.run("raise ValueError('the plain cell after')", allow_errors=True)
    out["raises"] = k.run("%%jaxmemprof -o runs/raises --force --no-page\nx.sum()\nraise ValueError('bad value')",
                          allow_errors=True)
    out["raised_report"] = k.run("%jaxmemprof report")
    out["kept_in_out"] = k.value(f"import json\nprint(json.dumps([{n} in Out, list(Out[{n}].shape), "
                                 f"_{n} is Out[{n}]]))")
    # %unload_ext: a run %jaxmemprof start began is stopped, the magics are gone, jax.jit is JAX's own again.
    out["unload_start"] = k.run("%jaxmemprof start -o runs/unloaded --force")
    out["runs_before_unload"] = sorted(p.name for p in (k.work / "runs").iterdir())
    out["unload"] = k.run("%unload_ext jaxmemprof")
    out["after_unload"] = k.run("%%jaxmemprof -o runs/after-unload --force --no-page\nafter = x.sum()",
                                allow_errors=True)
    out["line_after_unload"] = k.run("%jaxmemprof report", allow_errors=True)
    out["runs_after_unload"] = sorted(p.name for p in (k.work / "runs").iterdir())
    out["unloaded_state"] = k.value(
        "import json, jaxmemprof.api, jaxmemprof.notebook\n"
        "from jaxmemprof.capture.jit import Probed\n"
        "print(json.dumps([len(jaxmemprof.api.observers), len(jaxmemprof.notebook._loaded), "
        "isinstance(jax.jit(lambda a: a), Probed), 'after' in globals()]))")
    # Loaded again, it records again, under the right label.
    k.run("%load_ext jaxmemprof")
    out["reloaded"] = k.run("%%jaxmemprof -o runs/reloaded --force --no-page\nagain = x + 1")
    return out


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def traceback_text(cell) -> str:
    return "\n".join(ANSI.sub("", "\n".join(o["traceback"])) for o in cell.outputs if o.output_type == "error")


def test_a_train_step_jitted_in_another_cell_gets_its_donation_finding_with_the_cells_line(kernel):
    define = next(c for c in kernel.cells.values() if "train_step = jax.jit(step)" in c.source)
    line = define.source.splitlines().index("train_step = jax.jit(step)") + 1
    train = kernel.cells["%%jaxmemprof -o runs/train --force"]
    text = shown(train)
    # Measured: XLA's CPU compile of the donating step takes 1 MiB more temporaries than it aliases
    # less, so the run's true peak would not fall; the finding says so, with the fix.
    assert f"info donate  In [{define.execution_count}]:{line}" in text, text
    assert "Donating 'params' of step would not lower the run's true peak" in text
    # The true peak: live before the call (params 1.00 MiB + 2 KiB, x 512 KiB, y 1 KiB, Out[4]'s 512 KiB) less
    # its arguments, plus XLA's call peak (those arguments, new params, 1 MiB of temporaries): 4.01 MiB (4.51
    # before, when a per-shard view the recorder's own address reading made JAX keep counted as 512 KiB more).
    assert "true peak (4.01 -> 4.01 MiB, temporaries +1.00 MiB)" in text, text
    assert "loss " in stream(train)  # the cell itself ran
    # In another process (a terminal, the kernel gone) the cell's text is
    # nowhere but in the run: the same fix, from the line as it was recorded.
    later = run_cli("report", "--explain", kernel.work / "runs" / "train", cwd=kernel.work)
    assert f"info donate  In [{define.execution_count}]:{line}" in later.stdout, later.stdout
    assert ":  train_step = jax.jit(step, donate_argnums=(0,))" in later.stdout, later.stdout  # the cell's line, edited
    # Applied, the fix removes the finding (the step jitted again in a cell, run over cells).
    start, stop = kernel.cells["%jaxmemprof start -o runs/donated --force"], kernel.cells["%jaxmemprof stop --no-page"]
    stopped = shown(stop)
    assert stopped.startswith(f"jaxmemprof: In [{start.execution_count}] to In [{stop.execution_count}]: "), stopped
    assert not re.search(r"^\d+\. \w+ donate ", stopped, re.M), stopped


def test_a_function_jitted_in_a_run_is_observed_in_the_next(kernel):
    from jaxmemprof import load_run

    jits, jitted = (load_run(kernel.work / "runs" / name).jit for name in ("jits", "jitted"))
    for jit, compiles in ((jits, 1), (jitted, 0)):  # compiled in the first run only
        fn = jit.functions
        (fid,) = fn.loc[fn["name"] == "<lambda>", "function_id"]
        counts = jit.counts.set_index("function_id").loc[fid]
        assert (counts["calls"], counts["compiles"]) == (1, compiles)
        assert len(jit.compiles[jit.compiles["function_id"] == fid]) == 1  # XLA's figures read in each


def test_sites_are_named_by_cell_not_by_ipykernels_temporary_file(kernel):
    texts = [shown(c) + stream(c) for c in kernel.nb.cells if c.cell_type == "code"]
    assert not any("ipykernel_" in t for t in texts)
    data = kernel.cells['params = init(jax.random.key(0))'].execution_count
    train = shown(kernel.cells["%%jaxmemprof -o runs/train --force"])
    assert f"512.00 KiB  In [{data}]:2 (<module>)" in train  # x = jax.random.normal(...), line 2
    from jaxmemprof import load_run

    run = load_run(kernel.work / "runs" / "train")
    labels = set(run.source_names.values())
    assert {f"In [{n}]" for n in range(1, data + 1)} <= labels
    fn = run.jit.functions
    step = fn[fn["name"] == "step"].iloc[0]
    assert run.source_names[step["jit_file"]] == "In [2]"  # jitted in In [2], before the run


def test_the_output_history_holder_is_named_with_its_fix_and_the_saving_is_what_the_fix_frees(kernel):
    from jaxmemprof import load_run
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.rules.history import history_findings
    from jaxmemprof.glossary import documented_facts, fact_meaning

    look = kernel.cells['jnp.tanh(x @ params["w1"])  # a look at the activations: IPython keeps the value in Out']
    n = look.execution_count
    text = shown(kernel.cells["%%jaxmemprof -o runs/train --force"])
    assert f"medium output-history  In [{n}]:1 (<module>)  saves 512.00 KiB" in text, text
    assert f"IPython's output history keeps 512.00 KiB alive that nothing else holds: Out[{n}]." in text
    assert f"fix: %xdel _{n}" in text
    (f,) = history_findings(attribute(load_run(kernel.work / "runs" / "train")))
    assert f.saving_bytes == 256 * 512 * 4  # jnp.tanh of a float32 [256, 512]
    # %xdel _4 freed exactly that: the device's live buffers, before and after.
    assert kernel.live_before_fix - kernel.live_after_fix == f.saving_bytes
    (entry,) = f.fact("entries")
    assert entry["holder"] == f"Out[{n}]" and f"_{n}" in entry["names"] and entry["freed_arrays"] == 1
    assert set(f.facts) <= documented_facts("output-history")
    for k in f.facts:
        fact_meaning("output-history", k)


def test_only_what_nothing_else_holds_is_counted_as_freed(kernel):
    first = kernel.checks["first"]
    held = {(h, tuple(shape)): only for h, shape, only in kernel.checks["holders"]}
    assert held[(f"Out[{first}]", (300,))] == 0  # `kept` holds it too
    assert held[(f"Out[{first + 1}]", (400,))] == 1
    assert held[(f"Out[{first + 1}]", (300,))] == 0
    assert held[(f"Out[{first + 2}]", (500,))] == 1  # in a dict
    assert held[(f"Out[{first + 2}]", (600,))] == 1  # in a list in the dict
    # Python's own answer: after %xdel of the last two entries, what was
    # only the history's is gone, and `kept` is not.
    assert kernel.checks["alive"] == [True, False, False, False]


def test_the_inline_report_is_there_and_self_contained(kernel):
    page_html = shown(kernel.cells["%%jaxmemprof -o runs/train --force"], "text/html")
    m = re.search(r'<iframe [^>]*sandbox="allow-scripts"[^>]*srcdoc="([^"]*)"', page_html)
    assert m, page_html[:500]
    page = html.unescape(m.group(1))
    assert page.startswith("<!DOCTYPE html>") and 'id="jmp-data"' in page
    assert "default-src 'none'" in html.unescape(page)  # its Content-Security-Policy: nothing fetched
    for text in (page_html, page):
        assert not re.search(r"""\b(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
        assert not re.search(r"<(?:link|img|script)\b[^>]*\bsrc\s*=", text, re.I)
    # The summary's HTML says what its text says.
    assert "medium output-history" in page_html and "info donate" in page_html and "<code>In [" in page_html
    assert "In [2]" in page  # the page names sites by cell too


def test_report_and_profile_show_in_the_notebook(kernel):
    report = shown(kernel.cells["%jaxmemprof report --top 3"])
    assert report.startswith("jaxmemprof report: runs/donated") and "What held the live peak" in report
    profiled = kernel.cells["import jaxmemprof"]
    text, page = shown(profiled), shown(profiled, "text/html")
    assert text.startswith("jaxmemprof: profile(): ") and "run runs/evaluate" in text
    assert "findings: nothing to fix found" in text and "findings: nothing to fix found" in page


def test_a_cell_ending_with_a_semicolon_keeps_its_value_out_of_the_history(kernel):
    cell = kernel.checks["quiet"]
    assert not [o for o in cell.outputs if o.output_type == "execute_result"]
    assert shown(cell).startswith("jaxmemprof: In [")
    assert kernel.checks["quiet_in_out"] is False


def test_a_cell_that_awaits_is_refused_before_anything_is_recorded(kernel):
    said = stream(kernel.checks["awaits"])  # IPython shows a magic's UsageError on stderr
    assert said.startswith("UsageError: a %%jaxmemprof cell cannot await") and "%jaxmemprof start" in said
    assert not (kernel.work / "jaxmemprof-runs").exists()


def test_a_cell_that_raises_fails_after_its_summary(kernel):
    cell = kernel.checks["failed"]
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert errors and errors[-1]["ename"] == "CellFailed"
    assert "ZeroDivisionError" in "".join(errors[-1]["traceback"])
    assert "ended by an exception (ZeroDivisionError)" in shown(cell)
    from jaxmemprof import load_run

    run = load_run(kernel.work / "runs" / "fails")
    assert run.manifest["ended_by"] == "exception" and run.finished


def test_the_inline_report_draws_in_a_browser_offline(kernel, tmp_path):
    import time

    from _browser import Browser, chromium

    if chromium() is None:
        pytest.skip("no chromium on PATH (CI installs Debian's chromium)")
    out = tmp_path / "cell.html"
    out.write_text("<!DOCTYPE html><html><body>" + shown(kernel.cells["%%jaxmemprof -o runs/train --force"],
                                                          "text/html") + "</body></html>", encoding="utf-8")
    with Browser(width=1100, height=900) as b:
        page = b.open(out)
        with b._lock:
            since = len(b._events)
        # The sandboxed iframe is a target of its own: attached to, its page asked whether it drew.
        b.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True},
               page.session)
        frame = b.wait_event("Target.attachedToTarget", page.session, since)["params"]
        assert frame["targetInfo"]["type"] == "iframe" and frame["targetInfo"]["url"] == "about:srcdoc"
        ask = {"expression": "[document.documentElement.getAttribute('data-jmp-ready'), "
                             "document.querySelectorAll('#jmp svg').length, document.getElementById('jmp-errors').hidden]",
               "returnByValue": True}
        for _ in range(100):  # its script draws once it has loaded
            ready, charts, no_errors = b.send("Runtime.evaluate", ask, frame["sessionId"])["result"]["value"]
            if ready:
                break
            time.sleep(0.05)
        assert ready == "1" and charts > 0 and no_errors
        assert page.errors == []  # no console error, no request beyond the file itself


# -- what IPython numbers, and what the extension says of it (IPython 8 counts a
# cell once it has run, IPython 9 as it starts; both must read the same)


def test_the_kernel_runs_the_ipython_this_interpreter_has(kernel):
    import IPython

    assert kernel.checks["ipython"] == IPython.__version__


def test_a_recorded_cell_is_named_by_the_number_the_notebook_shows(kernel):
    from jaxmemprof import load_run

    cell = kernel.checks["kept"]
    n = cell.execution_count
    text = displayed(cell)
    assert text.startswith(f"jaxmemprof: In [{n}]: "), text
    assert f"1.00 MiB  In [{n}]:3 (<module>)" in text, text  # jnp.full(...), line 3 (the magic's line is 1)
    run = load_run(kernel.work / "runs" / "kept")
    assert run.manifest["argv"] == [f"In [{n}]"] and run.manifest["notebook"]["cells"] == f"In [{n}]"
    assert f"In [{n + 1}]" not in set(run.source_names.values())  # no cell was filed under the next number
    # The value went where the notebook shows it, Out[n] (the magic does not move the count).
    assert [o["execution_count"] for o in cell.outputs if o.output_type == "execute_result"] == [n]
    assert kernel.checks["kept_in_out"] == [True, [512, 512], True]


def test_the_output_history_advice_names_the_cell_and_the_entry_that_hold_the_array(kernel):
    from jaxmemprof import load_run
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.rules.history import history_findings

    n = kernel.checks["kept"].execution_count
    text = shown(kernel.checks["kept"])
    assert f"medium output-history  In [{n}]:3 (<module>)  saves 1.00 MiB" in text, text
    assert f"alive that nothing else holds: Out[{n}]." in text and f"fix: %xdel _{n} " in text, text
    (f,) = history_findings(attribute(load_run(kernel.work / "runs" / "kept")))
    (entry,) = [e for e in f.fact("entries") if e["holder"] == f"Out[{n}]"]
    assert f"_{n}" in entry["names"] and entry["freed_arrays"] == 1
    assert f.site == f"In [{n}]:3 (<module>)"


def test_the_cells_after_a_recorded_cell_keep_their_numbers(kernel):
    kept, plain, raises = (kernel.checks[k] for k in ("kept", "next_plain", "raises"))
    assert plain.execution_count == kept.execution_count + 1 and raises.execution_count == plain.execution_count + 1
    assert f"Cell In[{plain.execution_count}], line 1" in traceback_text(plain), traceback_text(plain)
    # A recorded cell's traceback reads its own number and line (the magic's line is line 1).
    assert f"Cell In[{raises.execution_count}], line 3" in traceback_text(raises), traceback_text(raises)


def test_a_recorded_cell_that_raised_is_reported_as_that_cell_with_its_exception(kernel):
    from jaxmemprof import load_run

    n = kernel.checks["raises"].execution_count
    assert shown(kernel.checks["raises"]).startswith(f"jaxmemprof: In [{n}]: ")
    assert "ended by an exception (ValueError)" in shown(kernel.checks["raises"])
    report = shown(kernel.checks["raised_report"])
    line = report.splitlines()[1]
    assert line.startswith(f"In [{n}] raised ValueError: bad value after "), report
    assert "profile()" not in report and "no exit status" not in report
    run = load_run(kernel.work / "runs" / "raises")
    assert run.manifest["ended_by"] == "exception" and run.finished
    assert run.manifest["notebook"]["raised"] == "ValueError: bad value"
    # From a terminal too: the run names the cell and what it raised, not profile().
    later = run_cli("report", kernel.work / "runs" / "raises", cwd=kernel.work).stdout
    assert f"\nIn [{n}] raised ValueError: bad value after " in later and "profile()" not in later, later
    assert "no exit status" not in later, later


def test_after_unload_ext_the_magic_is_not_found_and_records_nothing(kernel):
    from jaxmemprof import load_run

    checks = kernel.checks
    # The run %jaxmemprof start began was stopped by the unload, and kept.
    stopped = load_run(kernel.work / "runs" / "unloaded")
    assert stopped.finished and stopped.manifest["ended_by"] == "exit"
    started, unloaded = checks["unload_start"].execution_count, checks["unload"].execution_count
    assert stopped.manifest["argv"] == [f"In [{started}] to In [{unloaded}]"]
    assert stream(checks["unload"]).startswith(f"jaxmemprof: stopped recording into runs/unloaded (In [{started}] to "
                                               f"In [{unloaded}])"), stream(checks["unload"])
    said = stream(checks["after_unload"])
    assert said.startswith("UsageError: Cell magic `%%jaxmemprof` not found"), said
    assert stream(checks["line_after_unload"]).startswith("UsageError: Line magic function `%jaxmemprof` not found")
    assert checks["runs_after_unload"] == checks["runs_before_unload"]  # no run directory written
    assert not (kernel.work / "jaxmemprof-runs").exists()
    # No observer, no magics, jax.jit JAX's own (no probe's proxy); the cell's body never ran.
    assert checks["unloaded_state"] == [0, 0, False, False]
    # %load_ext again: it records again, under the cell's number.
    n = checks["reloaded"].execution_count
    assert shown(checks["reloaded"]).startswith(f"jaxmemprof: In [{n}]: ")
    assert load_run(kernel.work / "runs" / "reloaded").finished


def test_the_holder_of_an_array_the_output_history_keeps_is_named_in_a_real_kernel(kernel):
    from jaxmemprof import load_run
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.py_holders import holders

    look = kernel.cells['jnp.tanh(x @ params["w1"])  # a look at the activations: IPython keeps the value in Out']
    n = look.execution_count
    table = holders(attribute(load_run(kernel.work / "runs" / "train")))
    mine = table[table["site"] == f"In [{n}]:1 (<module>)"]
    assert not mine.empty, table
    row = mine.iloc[0]
    # Held by the history's name for that cell's value (its own name, before Out[…] and `_`).
    assert (row["holder"], row["kind"], row["arrays"], row["bytes"]) == (f"_{n}", "output-history", 1, 256 * 512 * 4)
    # The cell's own names hold the parameters: the program's globals, not the history's.
    assert set(table.loc[table["kind"] == "global", "holder"]) >= {"params['w1']", "x"}
