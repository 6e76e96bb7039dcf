"""Equinox. equinox.filter_jit: it jits a function of its own, over (arrays
donated, arrays not donated, the rest); donation is its ``donate`` option
(every array, or every array but the first argument's), and every leaf that
is not an array is static."""

from __future__ import annotations

import re
from typing import Any

from jaxmemprof.facts.libraries import STATE

NAME = "equinox.filter_jit"
FRAME = ("equinox", "filter_jit")
STATIC_LEAVES = True
SPELLING = r"(?:(?:eqx|equinox)\.)?filter_jit"
DECORATOR_TAKES_OPTIONS = True
VERB = "filter_jit"
DONATE_OPTION = "donate"
DONATES_EVERY_ARRAY = ("all", "all-except-first")
WORDS = {"remat": "equinox: eqx.filter_checkpoint",
         "reshard": "equinox's filter_shard",
         "static": ("equinox's filter_jit makes every non-array argument static: pass a changing number as an "
                    "array, jnp.asarray(lr)"),
         "donate_option": "equinox's `donate=...`",
         "donate_every_array": 'equinox\'s `donate="all"`',
         "donate_all_but_first": 'equinox\'s `donate="all-except-first"`',
         "donate_change": ("`equinox` (its `donate` option)",
                           "`equinox-restructure` (pass `pass_first` first and donate all but it)")}
_ARGUMENT = re.compile(r"^dynamic_(?:no)?donate\['(\w+)'\]")

_EQUINOX_PARAMS = ("dynamic_donate", "dynamic_nodonate", "static")


def options(frames) -> dict:
    """Its ``donate`` option, from filter_jit's frame."""
    for fr in frames:
        if fr.f_code.co_name == "filter_jit" and isinstance(fr.f_locals.get("donate"), str):
            return {"donate": fr.f_locals["donate"]}
    return {}


def jits_its_own(params) -> bool:
    """Whether jax.jit got equinox's own function (by its parameter names)."""
    return params == list(_EQUINOX_PARAMS)


def arguments(state, args, kwargs):
    """The user's arguments inside equinox.filter_jit's call of its own jitted
    function, ``(donated, not donated, static)``: the first two are dicts of
    the array leaves of ``first`` (the first argument), ``rest`` ((the other
    arguments, the keyword arguments)) and ``fun`` (the function's own
    arrays), the third their static leaves and tree structures."""
    donated_part, kept_part, (static_fun, static_first, static_rest) = args
    names = state.param_names

    def part(key, static):
        donated = key in donated_part
        return donated, _combine((donated_part if donated else kept_part)[key], static)

    donated, first = part("first", static_first)
    yield 0, names[0] if names else "", False, donated, first
    donated, (rest, keywords) = part("rest", static_rest)
    for i, value in enumerate(rest):
        yield i + 1, names[i + 1] if i + 1 < len(names) else "", False, donated, value
    for name, value in keywords.items():
        yield (names.index(name) if name in names else None), name, True, donated, value
    donated, fun = part("fun", static_fun)
    yield None, "(function)", False, donated, fun  # a module's own arrays, for a method


_STATE_TAG = "equinox.nn.State"


def tags(tu, value) -> dict:
    """id(leaf) -> ``equinox.nn.State`` for the array leaves of an
    ``eqx.nn.State`` in ``value`` (a model's running statistics: state, whatever
    names the index that reads them)."""
    import sys

    state_type = getattr(getattr(sys.modules.get("equinox"), "nn", None), "State", None)
    if state_type is None:
        return {}
    out: dict = {}
    for node in tu.tree_leaves(value, is_leaf=lambda x: isinstance(x, state_type)):
        if isinstance(node, state_type):
            for leaf in tu.tree_leaves(node):
                out.setdefault(id(leaf), _STATE_TAG)
    return out


def role(tag: str) -> str | None:
    return STATE if tag == _STATE_TAG else None


def names(tu, arguments) -> dict:
    """id(leaf) -> its path as the program writes it, for the leaves of an
    ``eqx.nn.State`` among a call's ``arguments`` ((name, value) pairs):
    JAX knows a State's entries by flat index only; the program reads one
    with the model's ``StateIndex`` (``state.get(model.bn.state_index)``),
    found among the arguments by its marker. An entry whose index no
    argument holds keeps JAX's path."""
    import sys

    nn = getattr(sys.modules.get("equinox"), "nn", None)
    state_type, index_type = getattr(nn, "State", None), getattr(nn, "StateIndex", None)
    if state_type is None or index_type is None:
        return {}

    def stop(x) -> bool:
        return isinstance(x, (state_type, index_type))

    states: list[tuple[str, Any]] = []
    indices: dict = {}
    for name, value in arguments:
        for path, x in tu.tree_flatten_with_path(value, is_leaf=stop)[0]:
            if isinstance(x, state_type):
                states.append((f"{name}{tu.keystr(path)}", x))
            elif isinstance(x, index_type):
                try:
                    indices.setdefault(x.marker, f"{name}{tu.keystr(path)}")
                except TypeError:  # a marker that is no dictionary key
                    continue
    out: dict = {}
    for where, state in states:
        try:
            values, markers = state.tree_flatten()
        except Exception:  # a State used up (equinox's own error)
            continue
        for marker, value in zip(markers, values):
            try:
                index = indices.get(marker)
            except TypeError:
                index = None
            if index is None:
                continue
            for path, leaf in tu.tree_flatten_with_path(value)[0]:
                out[id(leaf)] = f"{where}.get({index}){tu.keystr(path)}"
    return out


def argument_words(op, params) -> str | None:
    """The user's arguments in an argument buffer of equinox's own (donated,
    not donated) dicts: ``first`` is the first argument, ``rest`` the others,
    ``fun`` the function's own arrays."""
    m = _ARGUMENT.match(op)
    if not m:
        return None
    part = {"first": params[:1], "rest": params[1:]}.get(m.group(1))
    return f"argument {', '.join(part)}" if part else "argument (the function's own arrays)"


def donation(others) -> dict:
    """Equinox donates every array argument (``"all"``) or all but the first
    argument's (``"all-except-first"``): what else goes with the chosen,
    and, where an argument still used after a call would go too, pass it
    first (``pass_first``)."""
    kept = [o for o in others if not o[3]]  # still used after some call: must not be donated
    if not kept:
        return {"change": "equinox", "option": 'donate="all"', "also_donates": [o[0] for o in others]}
    if all(o[1] == 0 for o in kept):
        return {"change": "equinox", "option": 'donate="all-except-first"'}
    return {"change": "equinox-restructure", "option": 'donate="all-except-first"',
            "pass_first": [o[0] for o in kept], "edited_line": ""}


def fix_words(x: dict, site: str, listed) -> tuple[str, str] | None:
    """A restructure's words: the arguments still used after a call passed first, the rest donated."""
    if x.get("change") != "equinox-restructure":
        return None
    name, kept = x["function"], x["pass_first"]
    several = len(kept) > 1
    full = (f'filter_jit {name} with donate="all-except-first" and pass {listed(kept)} as its first '
            f"argument{' (one tuple)' if several else ''} (at {site}): the program still holds "
            f"{'them' if several else 'it'} after the call (so donating {'them' if several else 'it'} could "
            f"break a later use), and equinox donates every array argument but the first's")
    return full, f'pass {listed(kept)} first and filter_jit {name} with donate="all-except-first"'


def donated_call(fun, args, kwargs, params, facts):
    """The fix ``facts`` (``donation``'s) as equinox.filter_jit makes it: the
    user's function with the arguments ``pass_first`` passed first (one tuple
    where several, as the fix prints it), under ``filter_jit(...,
    donate=OPTION)``. ``fun`` is equinox's own function as the run jitted it
    (the run's trace replayed, or the program's own), ``args``/``kwargs`` its
    call in the run ((donated, not donated, static), their arrays abstract),
    ``params`` the user's parameter names. Returns (the function to jit with
    the run's jax.jit options, its call's args, kwargs): the call
    filter_jit's ``_preprocess`` makes for the fixed function (the first
    argument's arrays not donated unless ``donate="all"``; the others' and
    the function's own donated), whose function puts the user's arguments
    back in the run's order and calls ``fun`` on the run's split of them: the
    program's own computation, with the fix's arguments and donation."""
    import sys

    jax = sys.modules["jax"]
    eqx = sys.modules["equinox"]
    donated_part, kept_part, static = args
    static_fun, static_first, static_rest = static

    def part(key):
        return (donated_part if key in donated_part else kept_part)[key]

    first = _combine(part("first"), static_first)
    rest, keywords = _combine(part("rest"), static_rest)
    users = [first, *rest[:-1]]  # equinox's last positional argument is its own None
    wanted = [str(a) for a in facts.get("pass_first") or ()]
    picked: list[tuple[str, Any]] = []  # ("arg", position) or ("kw", name), in the fix's order
    for a in wanted:
        if a in keywords:
            picked.append(("kw", a))
        elif a in params and params.index(a) < len(users):
            picked.append(("arg", params.index(a)))
        elif a.isdigit() and int(a) < len(users):
            picked.append(("arg", int(a)))
        else:
            raise ValueError(f"the fix's first argument {a} is not an argument of the call")
    taken = {i for kind, i in picked if kind == "arg"}
    others = [i for i in range(len(users)) if i not in taken]
    values = [users[i] if kind == "arg" else keywords[i] for kind, i in picked]
    rest_keywords = {k: v for k, v in keywords.items() if ("kw", k) not in picked}
    if picked:
        new_first, new_rest = (tuple(values) if len(values) > 1 else values[0]), [users[i] for i in others]
    else:
        new_first, new_rest = users[0], users[1:]
    every = facts.get("option") == 'donate="all"'  # the first argument's arrays donated too

    def arrays(x):
        return eqx.is_array(x) or isinstance(x, jax.ShapeDtypeStruct)

    # filter_jit's _preprocess, for the fixed function (its arrays abstract)
    from equinox._compile_utils import hashable_combine, hashable_partition

    dyn_first, st_first = hashable_partition(new_first, arrays)
    dyn_rest, st_rest = hashable_partition((tuple(new_rest) + (None,), rest_keywords), arrays)
    donate: dict = {"fun": part("fun"), "rest": dyn_rest}
    keep: dict = {}
    (donate if every else keep)["first"] = dyn_first
    several = len(values) > 1

    def fixed(dynamic_donate, dynamic_nodonate, static):
        parts = {**dynamic_donate, **dynamic_nodonate}
        _, st_first, st_rest = static
        got_first = hashable_combine(parts["first"], st_first)
        got_rest, got_keywords = hashable_combine(parts["rest"], st_rest)
        got_rest = list(got_rest[:-1])
        if picked:
            got = list(got_first) if several else [got_first]
            back, kw = [None] * len(users), dict(got_keywords)
            for (kind, i), value in zip(picked, got):
                if kind == "arg":
                    back[i] = value
                else:
                    kw[i] = value
            for i, value in zip(others, got_rest):
                back[i] = value
        else:
            back, kw = [got_first, *got_rest], dict(got_keywords)
        # the run's split of them, each part where the run passed it (donated or not)
        run_first, _ = hashable_partition(back[0], eqx.is_array)
        run_rest, _ = hashable_partition((tuple(back[1:]) + (None,), kw), eqx.is_array)
        run_parts = {"first": run_first, "rest": run_rest, "fun": parts["fun"]}
        return fun({k: run_parts[k] for k in donated_part}, {k: run_parts[k] for k in kept_part},
                   (static_fun, static_first, static_rest))

    return fixed, (donate, keep, (static_fun, st_first, st_rest)), {}


def _combine(dynamic_leaves, static):
    """A pytree from equinox's split of it: (array leaves, (other leaves, structure))."""
    static_leaves, treedef = static
    return treedef.unflatten([d if s is None else s for d, s in zip(dynamic_leaves, static_leaves)])


REMAT = "eqx.filter_checkpoint"


def remats(cls) -> bool:
    """eqx.filter_checkpoint wraps an equinox Module's method."""
    import sys

    eqx = sys.modules.get("equinox")
    return cls is not None and eqx is not None and issubclass(cls, eqx.Module)


def remat(fn, policy):
    import sys

    return sys.modules["equinox"].filter_checkpoint(fn, policy=policy)
