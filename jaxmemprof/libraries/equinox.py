"""equinox.filter_jit: it jits a function of its own, over (arrays donated,
arrays not donated, the rest); donation is its ``donate`` option, and
every leaf that is not an array is static."""

from __future__ import annotations

NAME = "equinox.filter_jit"
FRAME = ("equinox", "filter_jit")
STATIC_LEAVES = True
SPELLING = r"(?:(?:eqx|equinox)\.)?filter_jit"
DECORATOR_TAKES_OPTIONS = True
VERB = "filter_jit"
DONATE_OPTION = "donate"

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
