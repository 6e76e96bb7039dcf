"""The donation advice's reading of bytecode (capture/jit/liveness.py) on the
Python running the tests: every Python the project declares compiles the
statements after a call with its own instructions (3.13 stores two locals with
one STORE_FAST_STORE_FAST), and the window in which an input's death means
"nothing used it after the call" must reach the next statement on each. CI
runs these on the newest Python declared too (``-m compat``, .ci/run)."""

from __future__ import annotations

import dis
import re
import textwrap

import pytest

from jaxmemprof.capture.jit import liveness

pytestmark = pytest.mark.compat


def test_every_load_and_store_of_locals_this_python_has_is_a_move():
    """Loads and stores of a frame's locals run no code of the program's
    (a store may free the value it replaces: that death is what is looked
    for). Any this Python's ``dis`` knows and liveness does not would end the
    window early."""
    names = [n for n in dis.opmap if re.fullmatch(r"(LOAD|STORE|DELETE)_FAST(_[A-Z_]+)?", n)]
    assert "LOAD_FAST" in names and "STORE_FAST" in names
    assert [n for n in names if n not in liveness._MOVES] == []


CASES = {
    # the README's example: the step's three results unpacked into locals (3.13: STORE_FAST_STORE_FAST)
    "three locals": ("def main(step, params, momentum, batch):\n"
                     "    params, momentum, losses = step(params, momentum, batch)\n"
                     "    return losses\n"),
    "two locals": ("def main(step, params, momentum):\n"
                   "    params, momentum = step(params, momentum)\n"
                   "    return params\n"),
    "one local": ("def main(step, state):\n"
                  "    state = step(state)\n"
                  "    return state\n"),
    "in a loop": ("def main(step, params, momentum, n):\n"
                  "    for i in range(n):\n"
                  "        params, momentum = step(params, momentum)\n"
                  "        print(i)\n"
                  "    return params\n"),
    "a local and an attribute": ("def main(step, model, opt):\n"
                                 "    model, opt.state = step(model, opt.state)\n"
                                 "    return model\n"),
    "module level": ("params, momentum = step(params, momentum)\n"
                     "print(params)\n"),
    "a cell": ("def main(step, state):\n"
               "    def read():\n"
               "        return state\n"
               "    state, other = step(state, state)\n"
               "    return read, other\n"),
}


def _code(source: str):
    module = compile(textwrap.dedent(source), "<case>", "exec")
    for const in module.co_consts:
        if hasattr(const, "co_code") and const.co_name == "main":
            return const
    return module


def _call_and_next_statement(code, source: str):
    """The offset of the call's instruction on the line that calls
    ``step`` (f_lasti while the step runs) and the instructions after it up
    to the first of the next line (the statement's own stores)."""
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "step(" in text and "def " not in text)
    ins = list(dis.get_instructions(code))

    def at(i):
        return i.positions.lineno if hasattr(i, "positions") and i.positions is not None else i.starts_line

    lines, current = [], None
    for i in ins:  # starts_line (before positions) is set on a line's first instruction only
        current = at(i) if at(i) is not None else current
        lines.append(current)
    calls = [k for k, i in enumerate(ins) if lines[k] == line and i.opname.startswith("CALL")]
    k = calls[-1]
    after = []
    for j in range(k + 1, len(ins)):
        if lines[j] != line:
            break
        after.append(ins[j])
    return ins[k].offset, after


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_window_after_a_call_reaches_the_next_statement(case):
    """Each instruction of the statement after its call (unpacking, the
    stores into locals, names, cells) is in the window: an input the stores
    free there was not used after the call."""
    source = CASES[case]
    code = _code(source)
    lasti, after = _call_and_next_statement(code, source)
    offsets, _ = liveness._window(code, lasti)
    stores = [i for i in after if i.opname not in ("STORE_ATTR",) and not i.opname.startswith("LOAD_ATTR")]
    if case == "a local and an attribute":
        # a store into an attribute may run the program's code (a property): the window ends before it
        first_attr = next(k for k, i in enumerate(after) if i.opname == "STORE_ATTR")
        stores = after[:first_attr]
    missing = [f"{i.offset} {i.opname}" for i in stores if i.offset not in offsets]
    assert missing == [], dis.Bytecode(code).dis()
    assert lasti in offsets


def test_a_returned_call_is_followed_into_the_caller():
    """``return step(state)``: the window holds the return, and says that the
    caller goes on with the result."""
    code = _code("def main(step, state):\n    return step(state)\n")
    lasti, _ = _call_and_next_statement(code, "def main(step, state):\n    return step(state)\n")
    offsets, returns = liveness._window(code, lasti)
    assert returns
