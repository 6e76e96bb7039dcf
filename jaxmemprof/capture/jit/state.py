"""What the probe holds for each jitted function: its counts, its samples,
the signatures analysed, and whether its calls are still observed; how a
jitted function's compile cache is asked its size, and the jax.monitoring
listener that wakes the probe's quiet functions on a compile."""

from __future__ import annotations

# After a compilation that happened while a function was quiet, how many calls
# the probe watches for the new signature (its arguments are not known).
HUNT_CALLS = 1000


class FunctionState:
    __slots__ = ("function_id", "calls", "traced", "samples", "resample", "pending", "compiles", "analyse_next", "hunt",
                 "signatures", "param_names", "donate_argnums", "donate_argnames", "arguments", "by_signature",
                 "cache", "quiet", "off", "errors", "proxy", "counted_all", "largest", "user", "backend_compiles",
                 "row", "compile_s", "static_argnums", "static_argnames", "static_leaves", "static_seen",
                 "jit_static", "pruned", "curves", "previous", "plan", "step", "seen", "counted", "uncounted",
                 "live_top", "programs", "reserved")

    def __init__(self, function_id, param_names, donate_argnums, donate_argnames, arguments, by_signature):
        self.function_id = function_id
        self.calls = 0  # device calls
        self.traced = 0  # calls made while a transformation traced (grad, vmap, scan, an outer jit)
        self.samples = 0
        self.resample = False  # the last sample's fates could not be told: sample the next call
        self.pending = None  # (call_id, [weakrefs]) of the last sampled call
        self.compiles = 0
        # Without a compile cache to watch (jax.pmap), each new signature is analysed.
        self.by_signature = by_signature
        self.analyse_next = by_signature
        self.hunt = HUNT_CALLS if by_signature else 0  # calls left to find a signature not analysed yet
        self.signatures: set = set()  # signatures analysed
        self.param_names = param_names
        self.donate_argnums = donate_argnums
        self.donate_argnames = donate_argnames
        self.arguments = arguments  # (state, args, kwargs) -> the call's arguments as the user wrote them
        self.cache = 0  # the jitted function's compile-cache size after the last call
        self.quiet = False  # all samples taken: calls go straight to the jitted function
        self.off = False  # observing it failed MAX_ERRORS times: no longer observed
        self.errors = 0
        self.proxy = None  # weak reference to its Probed (never to the jitted function itself,
        # which the program may drop, with everything its closure holds)
        self.counted_all = True  # every call counted (False once it went quiet)
        self.largest = None  # (call peak, signature, its lowering) of the largest signature, until dumped
        self.user = True  # the function is the user's (not a library's own jitted helper)
        self.backend_compiles = 0  # XLA compiles during its observed calls
        self.row = None  # its jit_functions row, for a copy of the function
        self.compile_s = 0.0  # XLA's compile time during its observed calls: what a dump of it costs
        self.static_argnums: list = []  # arguments JAX compiles for by value (static_argnums/argnames)
        self.static_argnames: list = []
        self.static_leaves = False  # every leaf not an array is static (equinox.filter_jit)
        self.static_seen: dict = {}  # a static value with no stable text -> its number, in order of first use
        self.jit_static = ((), (), ())  # jax.jit's own static_argnums, static_argnames, parameter names
        self.pruned: dict = {}  # signature -> key paths of the arguments XLA's program does not read
        self.curves = 0  # program-order curves written
        self.previous = None  # owners.Previous: the last sampled call's leaves, held weakly
        self.plan = None  # with run --plan, a user's function: plan.Slot (its abstract arguments; None otherwise)
        self.step = False  # the program's step: each call counted as one (JitProbe.stepped)
        # Every device call, sampled or quiet (calllive.py): seen, its live bytes counted, or not counted
        # (over the counts' budget); the most live on each device before a counted call so far.
        self.seen = 0
        self.counted = 0
        self.uncounted = 0
        self.live_top: dict = {}
        # On a TPU (programs.py): signature -> its lowered program's digest, and signature -> the
        # temporaries of its buffer assignment once a dump was read (its own or, where two
        # signatures lower to one program, as a step's first call with a Python int and the next
        # with an int32 do, the other's: one compile, one buffer assignment).
        self.programs: dict = {}
        self.reserved: dict = {}


def step_of(step: FunctionState | None, state: FunctionState) -> FunctionState | None:
    """The program's step, as a call of ``state``'s function begins:
    where the program marks no steps of its own, the first of the user's
    jitted functions called a second time (and each of its calls from then
    on counts as one: a marker, the snapshots keyed to steps,
    capture/steps.py), whether or not it is still sampled."""
    if step is None and state.calls >= 2 and state.user and not state.off:
        state.step = True
        return state
    return step


def compile_listener(probe_ref):
    """A jax.monitoring listener that wakes the probe's quiet functions on
    JAX's compile events, holding the probe weakly."""

    def listener(event: str, *args, **kwargs) -> None:
        probe = probe_ref()
        if probe is not None and event.startswith("/jax/core/compile/"):
            probe.on_compile(event, args[0] if args else 0.0, kwargs.get("fun_name"))

    return listener


def cache_size(real) -> int:
    """The jitted function's compile-cache size; -1 where it has none to ask
    (``jax.pmap``, a Python function)."""
    try:
        return int(real._cache_size())
    except Exception:
        return -1
