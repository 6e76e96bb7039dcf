"""The user's code is the user's, however libraries are installed (issue 51,
item 4): flax and optax copied, as ``pip install --target DIR`` leaves them,
into a directory on PYTHONPATH (with their ``*.dist-info``), optax once more
as a vendored tree (without), a zip on PYTHONPATH, and flax and optax
installed inside the program's own tree; the sites, the true peak's call and
the fix name the program's own lines, never a file of those libraries, while
the program's helper module in a subdirectory and its own project on
sys.path (installed for development, its ``*.egg-info`` beside it) stay the
user's. The decision is the run's (its manifest's ``libraries``): a reader
that has none of those directories reads the same.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from conftest import cpu_env, in_parallel, line_of, run_cli, write_script

pytest.importorskip("flax")
pytest.importorskip("optax")


def _installed(name: str) -> tuple[Path, Path]:
    """An installed package's directory and its ``*.dist-info``."""
    package = Path(importlib.util.find_spec(name).origin).parent
    [info] = [p for p in package.parent.glob(f"{name}-*.dist-info")]
    return package, info


def _copy(name: str, into: Path, dist_info: bool) -> None:
    package, info = _installed(name)
    into.mkdir(parents=True, exist_ok=True)
    shutil.copytree(package, into / name, ignore=shutil.ignore_patterns("__pycache__"))
    if dist_info:
        shutil.copytree(info, into / info.name)


TRAIN = """
import os
import sys
HERE = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("VENDOR_IN_TREE"):  # the program's own vendored libraries and helpers, put on sys.path by it
    sys.path.insert(0, os.path.join(HERE, "vendor"))
    sys.path.insert(0, os.path.join(HERE, "lib"))
import jax
import optax
from flax import nnx

from helpers.data import batch
if os.environ.get("VENDOR_IN_TREE"):
    from mylib import scratch
else:
    from myproj import scratch
    import zhelp


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(256, 512, rngs=rngs)  # LAYER1
        self.l2 = nnx.Linear(512, 10, rngs=rngs)

    def __call__(self, x):
        return self.l2(jax.nn.relu(self.l1(x)))


def loss_fn(model, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()


@nnx.jit  # JIT
def train_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss


model = MLP(nnx.Rngs(0))  # MODEL
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)  # OPTIMIZER
x, y = batch(64)
kept = scratch(3000)
zipped = zhelp.ones(5000) if not os.environ.get("VENDOR_IN_TREE") else None  # ZIPCALL
for i in range(3):
    loss = train_step(model, optimizer, x, y)  # STEP
print(round(float(loss), 4))
"""

HELPER = """
import jax.numpy as jnp


def batch(n):
    return jnp.ones((n, 256)), jnp.zeros((n,), jnp.int32)  # HELPER
"""

PROJECT = """
import jax.numpy as jnp


def scratch(n):
    return jnp.zeros((n, 8))  # PROJECT
"""

ZIPPED = """
import jax.numpy as jnp


def ones(n):
    return jnp.ones((n,))
"""


def _program(root: Path, in_tree: bool) -> Path:
    prog = root / "prog"
    (prog / "helpers").mkdir(parents=True)
    (prog / "helpers" / "__init__.py").write_text("")
    write_script(prog / "helpers", "data.py", HELPER)
    if in_tree:
        _copy("flax", prog / "vendor", dist_info=True)
        _copy("optax", prog / "vendor", dist_info=True)
        (prog / "lib").mkdir()
        write_script(prog / "lib", "mylib.py", PROJECT)
    else:
        # The user's own project, installed for development (setup.py develop leaves its egg-info beside it).
        src = prog / "src"
        (src / "myproj").mkdir(parents=True)
        write_script(src / "myproj", "__init__.py", PROJECT)
        (src / "myproj.egg-info").mkdir()
        (src / "myproj.egg-info" / "top_level.txt").write_text("myproj\n")
        (src / "myproj.egg-info" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: myproj\nVersion: 0.1\n")
    write_script(prog, "train.py", TRAIN)
    return prog


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of one flax/optax program: its libraries outside its tree
    (``outside``), and inside it (``inside``)."""
    out = {}
    jobs = []
    for name in ("outside", "inside"):
        root = tmp_path_factory.mktemp(name)
        prog = _program(root, in_tree=name == "inside")
        env = cpu_env()
        if name == "outside":
            _copy("flax", root / "deps", dist_info=True)  # pip install --target deps flax
            _copy("optax", root / "vendored", dist_info=False)  # a vendored tree: no metadata
            with zipfile.ZipFile(root / "zdeps.zip", "w") as z:
                z.writestr("zhelp/__init__.py", ZIPPED.lstrip())
            env["PYTHONPATH"] = os.pathsep.join(
                [str(root / "deps"), str(root / "vendored"), str(root / "zdeps.zip"), str(prog / "src"),
                 *filter(None, [env.get("PYTHONPATH")])])
        else:
            env["VENDOR_IN_TREE"] = "1"
        out[name] = {"root": root, "prog": prog, "run": root / "run"}
        jobs.append(lambda prog=prog, root=root, env=env: run_cli(
            "run", "--interval", "0.2", "-o", root / "run", "train.py", cwd=prog, env=env, check=0))
    for name, proc in zip(("outside", "inside"), in_parallel(*jobs)):
        out[name]["proc"] = proc
    return out


def _library_dirs(case) -> list[str]:
    root, prog = case["root"], case["prog"]
    return [str(root / "deps"), str(root / "vendored"), str(root / "zdeps.zip"), str(prog / "vendor")]


def _csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("case", ["outside", "inside"])
def test_no_site_is_a_library_file(runs, case, tmp_path):
    """The sites at the live peak and over the whole run, and the true peak's
    call, name the program's own lines; none is a file of flax or optax, where
    they were installed. Failed before: ``deps/optax/tree_utils/_tree_math.py:335
    (<lambda>)`` held the optimizer state, ``deps/flax/nnx/transforms/compilation.py``
    the new state, and the true peak was during a call of train_step at
    ``deps/flax/nnx/transforms/compilation.py:973``."""
    c = runs[case]
    prog, run = c["prog"], c["run"]
    train = prog / "train.py"
    stderr = c["proc"].stderr
    libs = _library_dirs(c)
    # Read from elsewhere, with none of the program's directories on sys.path: the run's own decision.
    reader = tmp_path / "elsewhere"
    reader.mkdir()
    peak = _csv(run_cli("show", f"{run}@peak", "--csv", "-", cwd=reader, check=0).stdout)
    run_cli("export", run, "--csv", reader / "csv", cwd=reader, check=0)
    sites = _csv((reader / "csv" / "sites.csv").read_text())
    report = run_cli("report", run, cwd=reader, check=0).stdout
    for row in peak + sites:
        for field in ("site", "file"):
            text = row.get(field) or ""
            assert not any(part in text for part in ("flax/", "optax/", "zhelp/", "deps/", "vendor")), (case, row)
    for text in (stderr, report):
        for d in libs:
            assert d not in text, (case, d)
        assert "compilation.py" not in text and "_tree_math.py" not in text, case
    shown = {r["site"] for r in sites}
    step = line_of(train, "# JIT")
    assert f"during a call of train_step (train.py:{step})" in stderr, stderr
    # The program's own lines: the model's, the optimizer's state, the step's outputs, its helper's.
    assert f"train.py:{line_of(train, '# OPTIMIZER')} (<module>)" in shown, shown
    assert f"train.py:{line_of(train, '# LAYER1')} (MLP.__init__)" in shown, shown
    assert f"train.py:{line_of(train, '# STEP')} (<module>)" in shown, shown
    assert f"helpers/data.py:{line_of(prog / 'helpers' / 'data.py', '# HELPER')} (batch)" in shown, shown
    # The fix is written in flax's terms: its nnx.jit recognised where it was installed.
    assert "@nnx.jit(donate_argnames=" in stderr, stderr


def test_the_users_own_project_and_a_zip(runs):
    """The program's own project on sys.path (an egg-info beside it, as a
    development install leaves it) is the user's, and so is a module of its
    own put on sys.path by the program itself; a zip on PYTHONPATH is a
    library's: its array is the caller's line's."""
    outside, inside = runs["outside"], runs["inside"]
    sites_out = {r["site"] for r in _csv(run_cli("show", outside["run"], "--csv", "-", "--top", "0",
                                                 cwd=outside["prog"], check=0).stdout)}
    sites_in = {r["site"] for r in _csv(run_cli("show", inside["run"], "--csv", "-", "--top", "0",
                                                cwd=inside["prog"], check=0).stdout)}
    line = line_of(outside["prog"] / "src" / "myproj" / "__init__.py", "# PROJECT")
    assert f"src/myproj/__init__.py:{line} (scratch)" in sites_out, sites_out
    assert f"lib/mylib.py:{line} (scratch)" in sites_in, sites_in
    train = outside["prog"] / "train.py"
    assert f"train.py:{line_of(train, '# ZIPCALL')} (<module>)" in sites_out, sites_out
    m = json.loads((outside["run"] / "manifest.json").read_text())["libraries"]
    assert str(outside["root"] / "deps") in m["dirs"] and str(outside["root"] / "zdeps.zip") in m["dirs"], m
    assert not any(str(outside["prog"]) in d for d in m["dirs"] + m["packages"]), m
    m = json.loads((inside["run"] / "manifest.json").read_text())["libraries"]
    vendor = inside["prog"] / "vendor"
    assert sorted(m["packages"]) == [str(vendor / "flax"), str(vendor / "optax")], m


def test_holders_name_the_programs_sites(runs):
    """What keeps the arrays alive is told by the program's own lines: each
    holder's site is the program's (the optimizer's state, the model's
    parameters: the step's line), and its names are the program's
    (``optimizer.opt_state[0].mu…``, ``kept``). Failed before: the model's
    and the optimizer's arrays were held by
    ``deps/flax/nnx/transforms/compilation.py:1023 (JitWrapped.__call__)``."""
    c = runs["outside"]
    run_cli("export", c["run"], "--csv", c["root"] / "hcsv", cwd=c["prog"], check=0)
    rows = _csv((c["root"] / "hcsv" / "holders.csv").read_text())
    assert rows
    for r in rows:
        for field in ("site", "created"):
            assert not any(p in (r.get(field) or "") for p in ("deps/", "vendored/", "zdeps.zip")), r
    by_holder = {r["holder"]: r["site"] for r in rows}
    step = line_of(c["prog"] / "train.py", "# STEP")
    assert by_holder.get("model.l1.kernel.value") == f"train.py:{step} (<module>)", by_holder
    assert by_holder.get("kept", "").startswith("src/myproj/__init__.py:"), by_holder


# -- the rule, without JAX ------------------------------------------------------------------


def test_a_run_without_libraries_keeps_todays_rule():
    """A run recorded before runs kept their libraries reads as it did."""
    from jaxmemprof.analysis.sites import Attribution
    from jaxmemprof.facts.paths import Libraries

    assert Libraries.from_manifest({"cwd": "/w"}) is None
    old = Attribution()
    assert not old.is_library("/tmp/deps/optax/_src/alias.py")
    assert old.is_library("/usr/lib/python3/dist-packages/optax/_src/alias.py")
    new = Attribution(libraries=Libraries.from_manifest({"libraries": {"dirs": ["/tmp/deps"], "packages": []}}))
    assert new.is_library("/tmp/deps/optax/_src/alias.py")
    assert not new.is_library("/tmp/depsx/train.py")
    assert new.display_path("/tmp/deps/optax/_src/alias.py") == "optax/_src/alias.py"
    assert Attribution(libraries=new.libraries, user=("*/optax/*",)).is_library("/tmp/deps/optax/a.py") is False


def test_damaged_libraries_are_read_as_far_as_they_are_paths():
    from jaxmemprof.facts.paths import Libraries, installed_part, is_library

    libs = Libraries.from_manifest({"libraries": {"dirs": ["/a", 3, None, ""], "packages": "x"}})
    assert libs == Libraries(dirs=("/a",))
    assert Libraries.from_manifest({"libraries": []}) is None
    assert is_library("/a/b.py", libs) and not is_library("/ab.py", libs)
    both = Libraries.union([libs, None, Libraries(packages=("/p/vendor/six.py", "/p/vendor/flax"))])
    assert both.holds("/p/vendor/six.py") and both.holds("/p/vendor/flax/nnx/x.py")
    assert not both.holds("/p/vendor/sixx.py") and not both.holds("/p/vendor/flaxen/x.py")
    assert installed_part("/p/vendor/flax/nnx/x.py", both) == "flax/nnx/x.py"
    assert installed_part("/p/vendor/flax/nnx/x.py") is None


def test_compute_the_trees_rules(tmp_path, monkeypatch):
    """The rule as the target process applies it, on directories made here."""
    from jaxmemprof.capture import library_roots

    prog, outside, zipped = tmp_path / "prog", tmp_path / "site", tmp_path / "deps.zip"
    (prog / "src" / "proj").mkdir(parents=True)
    (prog / "src" / "proj.egg-info").mkdir()
    (prog / "src" / "proj.egg-info" / "top_level.txt").write_text("proj\n")
    (prog / "vendor" / "lib1").mkdir(parents=True)
    info = prog / "vendor" / "lib1-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("lib1/__init__.py,,\nlib1-1.0.dist-info/METADATA,,\n../../bin/x,,\n")
    (prog / "vendor" / "mine").mkdir()  # no metadata: the program's
    editable = prog / "vendor" / "proj-0.1.dist-info"  # the user's project, installed editable
    editable.mkdir()
    (editable / "top_level.txt").write_text("mine\n")
    (editable / "direct_url.json").write_text(json.dumps({"url": "file:///p", "dir_info": {"editable": True}}))
    added = tmp_path / "added"  # put on sys.path by the program itself
    (added / "thing").mkdir(parents=True)
    outside.mkdir()
    zipped.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    (prog / "train.py").write_text("")
    manifest = {"cwd": str(prog), "argv": ["train.py"]}
    monkeypatch.setattr(library_roots, "_BEFORE", frozenset({str(outside), str(zipped)}))
    path = [str(prog), str(prog / "src"), str(prog / "vendor"), str(outside), str(zipped), str(added)]
    libs = library_roots.compute(manifest, path)
    assert libs.dirs == (str(outside), str(zipped)), libs
    assert libs.packages == (str(prog / "vendor" / "lib1"),), libs
    assert libs.program[0] == str(prog)
    assert not libs.holds(str(prog / "src" / "proj" / "a.py"))
    assert not libs.holds(str(added / "thing" / "a.py"))
    assert libs.holds(str(zipped / "m" / "a.py"))
    # profile() and the pytest plugin (no target of run's): only distributions and zips.
    libs = library_roots.compute({"cwd": str(prog), "argv": []}, path)
    assert libs.dirs == (str(zipped),), libs
