"""The shape of the code, checked: data flows one way through the layers
(capture -> store -> pprof/xla -> analysis (its rules in analysis/rules/) ->
render -> cli, and the glossary, a docs tool, above them), no import circle (imports inside
functions included), no module over 700 lines but generated ones, and no
library named outside jaxmemprof/facts/libraries/. Read from the source with
``ast``: nothing is imported but the rules' and the libraries' registries."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

from jaxmemprof.analysis.rules import RULES
from jaxmemprof.facts.libraries import PACKAGES as LIBRARY_PACKAGES

PACKAGE = REPO / "jaxmemprof"
LOW = ("capture", "store", "pprof", "xla", "xprof")  # may not import the layers above them
HIGH = ("analysis", "render", "cli", "glossary")
MAX_LINES = 700



def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in it."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    # Imports under `if TYPE_CHECKING:` are for the annotations only: never run.
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", getattr(block.test, "attr", None)) == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" for a in node.names] + [mod]
        else:
            continue
        for t in targets:
            # the longest module name the import names (a module, or a name in one)
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name and t.startswith("jaxmemprof"):
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_low_layers_import_nothing_above_them():
    upward = set()
    for name, deps in _graph().items():
        if _layer(name) in LOW:
            for d in deps:
                if _layer(d) in HIGH or d == "jaxmemprof":
                    upward.add((name, d))
    assert upward == set(), "imports that flow up"


# Above the low layers, each layer imports only those before it: the findings
# (analysis, their rules included) never import their outputs.
ORDER = ("analysis", "render", "cli", "glossary")


def test_the_upper_layers_import_only_those_below():
    upward = set()
    for name, deps in _graph().items():
        if _layer(name) in ORDER:
            above = ORDER[ORDER.index(_layer(name)) + 1:]
            upward |= {(name, d) for d in deps if _layer(d) in above}
    assert upward == set()


def test_no_import_circle():
    graph = _graph()
    # The package's __init__ re-exports the API: a module importing it is an
    # upward import (checked above), not a circle through everything.
    graph["jaxmemprof"] = set()
    state: dict[str, int] = {}
    cycles = []

    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])
    assert cycles == []


def test_no_module_is_too_long_to_read():
    long = {str(p.relative_to(REPO)) for p in PACKAGE.rglob("*.py")
            if not p.name.endswith("_pb2.py") and len(p.read_text().splitlines()) > MAX_LINES}
    assert long == set(), f"modules over {MAX_LINES} lines"


# XLA's memory_analysis() figures, as the probe names them (jit_compiles' columns) and as XLA does.
XLA_FIGURES = {
    "argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes",
    "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
    "generated_code_size_in_bytes",
}


def _figures_named(node, one: dict | None = None) -> set[str]:
    """The XLA figures an expression names: ``x.temp_bytes``, ``temp_bytes``,
    and ``"temp_bytes"`` (``x["temp_bytes"]``, ``x.get("temp_bytes")``,
    ``getattr(x, "temp_bytes")``, a tuple of them); ``one``: names bound
    to one figure (``outputs = int(fig.get("output_bytes") or 0)``)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in XLA_FIGURES:
            out.add(n.attr)
        elif isinstance(n, ast.Name) and n.id in XLA_FIGURES:
            out.add(n.id)
        elif isinstance(n, ast.Name) and one and n.id in one:
            out.add(one[n.id])
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in XLA_FIGURES:
            out.add(n.value)
    return out


def _is_text(node) -> bool:
    return isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, str)


def _terms(node) -> list:
    """The terms of a sum or difference: ``a + b - c`` -> [a, b, c]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _terms(node.left) + _terms(node.right)
    return [node]


def _holding_figures(tree) -> tuple[set[str], dict]:
    """The names bound to several of XLA's figures at once (``figures =
    [getattr(r, c) for c in ("argument_bytes", ...)]``, ``values = [...
    for f in fields]`` where ``fields`` names them): their items are
    figures too, read by position; and the names bound to one figure."""
    held: set[str] = set()
    one: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            named = _figures_named(node.value)
            if len(named) == 1:
                one[node.targets[0].id] = next(iter(named))
    changed = True
    while changed:
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                value = node.value
                if len(_figures_named(value)) >= 2 or any(isinstance(n, ast.Name) and n.id in held
                                                           for n in ast.walk(value)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        if isinstance(t, ast.Name) and t.id not in held:
                            held.add(t.id)
                            changed = True
    return held, {k: v for k, v in one.items() if k not in held}


def _reads_held(node, held: set[str]) -> bool:
    """Whether an expression reads an item of a name holding several figures
    (``figures[0]``, ``values[:2]``)."""
    return any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in held
               and not (isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str))
               for n in ast.walk(node))


def xla_figure_sums(tree) -> list[int]:
    """The lines where XLA's figures are added or subtracted one with
    another (two or more of them, each in its own term of a sum or
    difference: ``argument + output - alias``, ``temp + code``, ``output -
    alias``; by name, or by position in a list or tuple of them), or summed
    by ``sum(...)`` over several of them: the arithmetic of the call peak
    and its parts."""
    held, one = _holding_figures(tree)
    lines = []
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)) and id(node) not in inner:
            terms = _terms(node)
            inner.update(id(n) for n in ast.walk(node) if isinstance(n, ast.BinOp))
            if any(_is_text(t) for t in terms):
                continue
            named = [_figures_named(t, one) for t in terms]
            by_position = sum(1 for t in terms if _reads_held(t, held))
            if len(set().union(*named)) >= 2 and sum(1 for n in named if n) >= 2 or by_position >= 2:
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "sum" and node.args \
                and len(_figures_named(node.args[0])) >= 2:
            lines.append(node.lineno)
    return lines


def test_the_true_peak_is_computed_in_one_module():
    """XLA's call peak (arguments + outputs - aliased + temporaries + code),
    its parts (temporaries + code, outputs - aliased) and the true peak
    built on it (live before, less the placed arguments, plus the call
    peak) are computed in jaxmemprof/facts/truepeak.py only: the report, the
    pytest plugin's in-memory path, the probe and the plan read it there.
    Checked on the arithmetic: any sum or difference of two of XLA's
    figures anywhere else fails."""
    where = {}
    for path in PACKAGE.rglob("*.py"):
        lines = xla_figure_sums(ast.parse(path.read_text()))
        if lines:
            where[str(path.relative_to(REPO))] = lines
    assert set(where) == {"jaxmemprof/facts/truepeak.py"}, where


def test_the_figure_check_sees_the_arithmetic_not_the_names():
    """The check above, on small sources: it finds each way of writing the
    sum, and not a figure compared with itself or put in words."""
    found = [
        "p = fig['argument_bytes'] + fig['output_bytes'] - fig['alias_bytes']",
        "t = row.temp_bytes + row.generated_code_bytes",
        "o = ma.output_size_in_bytes - ma.alias_size_in_bytes",
        "s = sum(r.get(c) for c in ('temp_bytes', 'generated_code_bytes'))",
        "q = int(a.get('output_bytes') or 0) - int(a.get('alias_bytes') or 0)",
        "f = [getattr(r, c) for c in ('argument_bytes', 'output_bytes', 'alias_bytes')]\nc = f[0] + f[1] - f[2]",
        "n = ('temp_size_in_bytes', 'generated_code_size_in_bytes')\nv = [getattr(m, x) for x in n]\n"
        "k = sum(x or 0 for x in v[:1]) + (v[1] or 0)",
        "o = int(f.get('output_bytes') or 0)\nn = o - int(f.get('alias_bytes') or 0)",
    ]
    for text in found:
        assert len(xla_figure_sums(ast.parse(text))) == 1, text
    for text in ("d = new['alias_bytes'] - int(old.get('alias_bytes', 0))", "w = 'temp ' + str(f['temp_bytes'])",
                 "x = busiest - mine + peak", "y = f['temp_bytes'] * 2"):
        assert xla_figure_sums(ast.parse(text)) == [], text


def _functions_of(path: Path) -> set[str]:
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_render_imports_no_analysis_function():
    """The renderers only serialise what analysis built (the Report, the
    page's model, the findings): they may name its classes and constants,
    never call one of its functions (an import of one anywhere in render/,
    inside functions included, or of a whole analysis module)."""
    modules = _modules()
    calls = set()
    for path in sorted((PACKAGE / "render").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                calls |= {(path.name, a.name) for a in node.names if a.name.startswith("jaxmemprof.analysis")}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxmemprof.analysis"):
                source = modules.get(node.module)
                for a in node.names:
                    if f"{node.module}.{a.name}" in modules:  # a module of analysis: its functions are at hand
                        calls.add((path.name, f"{node.module}.{a.name}"))
                    elif source is not None and a.name in _functions_of(source):
                        calls.add((path.name, f"{node.module}.{a.name}"))
    assert calls == set(), "render/ imports these analysis functions: compute them in analysis"


def _rule_names(path: Path) -> set[str]:
    """The rules a module declares: ``Rule("name", ...)``."""
    return {n.args[0].value for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Rule" and n.args
            and isinstance(n.args[0], ast.Constant)}


def test_each_rules_detection_severity_and_words_are_in_one_module():
    """A finding is defined in one place: the module under analysis/rules/
    that declares its Rule (its facts, meanings and words) is the only one
    that makes a Finding of it (its detection, with its severity), and it
    has a ``detect`` the report runs (the job's rules run on a job)."""
    rules_dir = PACKAGE / "analysis" / "rules"
    declared = {name: path for path in rules_dir.glob("*.py") for name in _rule_names(path)}
    assert len(declared) == len(RULES), declared
    made: dict = {}
    for path in PACKAGE.rglob("*.py"):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Finding":
                kw = {k.arg: k.value for k in n.keywords}
                if isinstance(kw.get("rule"), ast.Constant):  # a finding made here (not one read back)
                    assert "severity" in kw, f"{path}: a {kw['rule'].value} finding without its severity"
                    made.setdefault(kw["rule"].value, set()).add(path)
    assert set(made) == set(declared), set(made) ^ set(declared)
    elsewhere = {rule: sorted(str(p.relative_to(REPO)) for p in paths) for rule, paths in made.items()
                 if paths != {declared[rule]}}
    assert elsewhere == {}, "findings made outside the module that declares their rule"
    for path in set(declared.values()):
        assert "def detect(" in path.read_text() or path.name == "job.py", f"{path.name} has no detect"


# The pandas calls that shape data: which rows, grouped how, in which order. They belong to analysis/ (the
# documents of analysis/page.py); render/ prints what it is handed.
SHAPING = {"groupby", "sort_values", "sort_index", "sort", "merge", "idxmax", "idxmin", "nlargest", "nsmallest",
           "pivot", "pivot_table", "value_counts", "cumcount", "rank"}


def test_render_shapes_no_data():
    """No module of render/ groups, sorts, merges or picks a maximum's row:
    analysis/page.py hands it a document ready to print."""
    calls = set()
    for path in sorted((PACKAGE / "render").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SHAPING:
                calls.add((str(path.relative_to(REPO)), node.lineno, node.func.attr))
    assert calls == set(), "render/ shapes data: move the choice into analysis/page.py"


# The commands whose output is not a report, a job's report or a profile, written by renderers of their
# own: check's verdict (render/check.py), top's live screen (render/top.py) and run's closing lines.
OWN_OUTPUTS = {"jaxmemprof.cli.check", "jaxmemprof.cli.top", "jaxmemprof.cli.record"}


def test_every_commands_output_goes_through_the_format_table():
    """report, export, show and diff (a run, a job, one or two profiles) write
    only through render/formats/ (cli/formats.py's ``emit``): no module of
    cli/ but cli/formats.py imports that package, none imports a renderer
    (render/escape.py's escaping aside) but the commands with outputs of
    their own, and the table names every module of the package."""
    graph = _graph()
    renderers = {}
    for name, deps in graph.items():
        if _layer(name) == "cli":
            used = {d for d in deps if _layer(d) == "render" and d != "jaxmemprof.render.escape"}
            if used:
                renderers[name] = used
    formats = renderers.pop("jaxmemprof.cli.formats")
    assert formats == {"jaxmemprof.render.formats"}
    assert set(renderers) == OWN_OUTPUTS, renderers
    assert not any(d.startswith("jaxmemprof.render.formats") for deps in renderers.values() for d in deps)
    from jaxmemprof.render.formats import MODULES, get

    files = {p.stem for p in (PACKAGE / "render" / "formats").glob("*.py")} - {"__init__"}
    assert files == set(MODULES)
    for name in MODULES:
        fmt = get(name)
        assert fmt.name == name and (fmt.run or fmt.job or fmt.profiles)
    for command in ("runs.py", "profiles.py"):  # each of their outputs is an emit(<a format>, <a document>)
        tree = ast.parse((PACKAGE / "cli" / command).read_text())
        emitted = {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call)
                   and getattr(n.func, "id", None) == "emit" and isinstance(n.args[0], ast.Constant)}
        assert emitted and emitted <= set(MODULES), (command, emitted)


# The libraries jaxmemprof knows beyond JAX's own: their packages (libraries/, each module's PACKAGE) and the
# names their users write for them (nnx, eqx, linen), as whole words (``lineno`` is not ``linen``).
_KNOWN = ("flax", "equinox", "optax", "haiku", "nnx", "eqx", "linen", *LIBRARY_PACKAGES)
_NAMES_ONE = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, sorted(set(_KNOWN)))) + r")(?![A-Za-z0-9])",
                        re.IGNORECASE)


def _library_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each place the code names a library: an import of one,
    an identifier or a string (an f-string's text too) that says one. A
    docstring, like a comment, explains and is left alone."""
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            words = [a.name for a in node.names] + [a.asname or "" for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            words = [node.module or ""] + [a.name for a in node.names] + [a.asname or "" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words = [node.value]
        elif isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words = [node.name]
        elif isinstance(node, ast.arg):
            words = [node.arg]
        elif isinstance(node, ast.keyword):
            words = [node.arg or ""]
        else:
            continue
        found += [(getattr(node, "lineno", 0), m.group(0)) for w in words for m in _NAMES_ONE.finditer(w)]
    return found


def test_only_libraries_names_a_library():
    """Everything jaxmemprof knows of a library (flax, equinox, optax, haiku:
    its wrapper, what it calls its arrays, its remat, its donation option, its
    words in a fix) is in its module under jaxmemprof/facts/libraries/, behind the
    protocol libraries/__init__.py describes: no other module imports one or
    says its name in code (a new library is one file there)."""
    named = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[:2] == ("facts", "libraries") or path.name.endswith("_pb2.py"):
            continue
        hits = _library_names(ast.parse(path.read_text()))
        if hits:
            named[str(rel)] = hits
    assert named == {}, "modules outside jaxmemprof/facts/libraries/ that name a library"


def test_the_library_check_sees_each_way_of_naming_one():
    """The check above fails on an import, a lookup by name, a word of a fix,
    an identifier, and passes over a docstring, a comment and ``lineno``."""
    source = '''"""flax's docstring, left alone."""
import optax
from equinox import filter_jit
import jax
def nnx_owners(frame, lineno):  # flax.nnx, in a comment
    """linen, in a docstring."""
    words = f"wrap it in {spelling} (equinox: eqx.filter_checkpoint)"
    return sys.modules.get("haiku"), frame.f_lineno, words
'''
    assert [w for _, w in _library_names(ast.parse(source))] == [
        "optax", "equinox", "nnx", "equinox", "eqx", "haiku"], _library_names(ast.parse(source))


# The facts layer (jaxmemprof/facts/: the rules of JAX, XLA, the devices and the libraries that the recorder and
# the analyses share) stands on its own: it imports nothing of jaxmemprof's but itself and the root's leaves.
LEAVES = ("jaxmemprof.units", "jaxmemprof.finite", "jaxmemprof.errors", "jaxmemprof._version")


def test_the_facts_layer_imports_nothing_above_it():
    outside = {(name, d) for name, deps in _graph().items() if _layer(name) == "facts"
               for d in deps if _layer(d) != "facts" and d not in LEAVES}
    assert outside == set(), "the facts layer imports these"


def test_no_module_imports_another_modules_private_name():
    """A module uses another's public names only: a name another module
    needs is part of its interface, and spelled so."""
    private = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name.endswith("_pb2.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxmemprof"):
                private += [(str(path.relative_to(REPO)), node.module, a.name) for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert private == [], "private names imported across modules"
