"""The statement that jitted a function (source.py) and the donation fix
written on it (analysis/advice/donation.py's _suggest), held to Python's own
parser: the statement read is the one ``ast`` finds at that line, and the
edited statement parses to the same call with the donation option added."""

from __future__ import annotations

import ast
import textwrap

import pytest

from jaxmemprof.analysis.advice.donation import suggest
from jaxmemprof.facts.source import MAX_STATEMENT, statement_at

OPTION = "donate_argnums=(0,)"

# The forms of a wrapper's call that people write, each in a file of its own (a function's body included).
FORMS = {
    "one line": "step = jax.jit(update, static_argnums=(2,))",
    "trailing comma inside": "step = jax.jit(update, static_argnums=2,)",
    "one argument a line": "step = jax.jit(\n    update,\n    static_argnums=(2,),\n)",
    "no trailing comma": "step = jax.jit(\n    update,\n    static_argnums=(2,)\n)",
    "closed on the last argument's line": "step = jax.jit(update,\n               static_argnums=(2,))",
    "opening line's arguments, closed alone": "step = jax.jit(update, static_argnums=2,\n)",
    "a comment on the opening line": "step = jax.jit(  # the step\n    update,\n    static_argnums=(2,),\n)",
    "brackets in a string": 'step = jax.jit(\n    update,\n    static_argnames=("(",),\n)',
    "partial, two lines": '@functools.partial(jax.jit,\n                   static_argnames=("scale",))',
    "partial, one argument a line": '@functools.partial(\n    jax.jit,\n    static_argnames=("scale",),\n)',
    "bare decorator": "@jax.jit",
}


def _file(tmp_path, statement: str, indent: str = "") -> tuple[str, int]:
    """A file with ``statement`` (indented by ``indent``) after two lines and
    before a line of its own; (its name, the statement's first line)."""
    body = textwrap.indent(statement, indent) + "\n"
    if statement.startswith("@"):
        body += indent + "def update(params, x, scale):\n" + indent + "    return params\n"
    head = "import functools\n" + ("def outer():\n" if indent else "\n")
    path = tmp_path / "prog.py"
    path.write_text(head + body + indent + "after = 1\n")
    return str(path), 3


def _call(code: str) -> ast.Call:
    """The wrapper's call in ``code`` (a decorator's, with a function under it)."""
    if code.startswith("@"):
        code += "\ndef update(params, x, scale):\n    return params\n"
    node = ast.parse(code).body[0]
    call = node.decorator_list[0] if isinstance(node, ast.FunctionDef) else node.value
    return call if isinstance(call, ast.Call) else ast.Call(func=call, args=[], keywords=[])


@pytest.mark.parametrize("indent", ["", "    "])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_statement_read_is_the_one_python_parses_at_that_line(tmp_path, form, indent):
    name, line = _file(tmp_path, FORMS[form], indent)
    text = statement_at(name, line)
    tree = ast.parse(open(name).read())
    # The assignment, or the decorator, that starts on that line.
    [node] = [n for n in ast.walk(tree) for n in ([n.value] if isinstance(n, ast.Assign) else
                                                  n.decorator_list if isinstance(n, ast.FunctionDef) else [])
              if n.lineno == line]
    end = node.end_lineno
    assert text == "\n".join(open(name).read().splitlines()[line - 1:end])


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_edited_statement_is_the_same_call_with_the_option_added(form):
    original = FORMS[form]
    edited = suggest({"jit_source": "    " + original.replace("\n", "\n    ")}, OPTION, "jax.jit")
    assert edited, form
    before, after = _call(original), _call(edited)
    if original == "@jax.jit":  # becomes functools.partial(jax.jit, donate_argnums=...)
        assert ast.dump(after.args[0]) == ast.dump(before.func)
    else:
        assert ast.dump(after.func) == ast.dump(before.func)
        assert [ast.dump(a) for a in after.args] == [ast.dump(a) for a in before.args]
        assert [ast.dump(k) for k in after.keywords[:-1]] == [ast.dump(k) for k in before.keywords]
    assert ast.unparse(after.keywords[-1]) == OPTION
    # Each line of the original is there as it was (the indent of the first taken off), but the one
    # the option was added to.
    kept = {line.rstrip(",") for line in edited.split("\n") if OPTION not in line}
    assert kept <= {line.rstrip(",") for line in original.split("\n")}


def test_no_fix_is_written_where_a_comment_stands_where_the_comma_goes():
    assert suggest({"jit_source": "step = jax.jit(\n    update  # the step\n)"}, OPTION, "jax.jit") == ""


def test_a_statement_that_does_not_close_or_parse_is_its_first_line_alone(tmp_path):
    path = tmp_path / "open.py"
    path.write_text('s = """\nf(\n"""\ng = jax.jit(update,\n')
    assert statement_at(str(path), 2) == "f("
    assert statement_at(str(path), 4) == "g = jax.jit(update,"
    assert statement_at(str(path), 9) == ""  # past the end
    assert statement_at(str(tmp_path / "gone.py"), 1) == ""


def test_a_statement_too_long_to_edit_is_not_kept(tmp_path):
    path = tmp_path / "long.py"
    args = ",\n".join(f"    argument_{i}='{'x' * 40}'" for i in range(30))
    path.write_text(f"step = jax.jit(\n{args}\n)\n")
    assert len(open(path).read()) > MAX_STATEMENT
    assert statement_at(str(path), 1) == ""
