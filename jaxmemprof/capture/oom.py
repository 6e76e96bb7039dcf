"""Where the program ran out of memory: the user's innermost line in the
failure's traceback (a jitted call's, an eager op's, a device_put's), for
the run's ``oom-at`` event (JSON: file, line, function)."""

from __future__ import annotations

import json

from jaxmemprof.capture.library_roots import is_library


def failure_line(exc: BaseException) -> str:
    """``{"file", "line", "function"}`` of the innermost frame of ``exc``'s
    traceback that is the user's (not jaxmemprof's, JAX's, a library's)."""
    found = None
    tb = exc.__traceback__
    try:
        while tb is not None:
            code = tb.tb_frame.f_code
            if not is_library(code.co_filename):
                found = {"file": code.co_filename, "line": tb.tb_lineno, "function": code.co_name}
            tb = tb.tb_next
    except Exception:
        pass
    return json.dumps(found or {})
