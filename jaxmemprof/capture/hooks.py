"""Running code right after a module is first imported (the jit probe on
jax, the session's jax.distributed wrapper), without importing it first."""

from __future__ import annotations

import importlib.abc
import sys


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``callback(module)`` once ``name`` is first imported, before
    the importer gets it. Other finders that wrap the same module's loader
    (the jit probe's) are asked in turn; a search it started itself is
    passed over, so two such finders never recurse into each other."""

    def __init__(self, name: str, callback):
        self.name, self.callback = name, callback
        self._searching = False

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or self._searching:
            return None
        self._searching = True
        try:
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._searching = False
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        real: importlib.abc.Loader = loader
        hook = self

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return real.create_module(spec)

            def exec_module(self, module):
                module.__loader__ = module.__spec__.loader = real
                real.exec_module(module)
                if hook in sys.meta_path:
                    sys.meta_path.remove(hook)
                hook.callback(module)

        spec.loader = _Loader()
        return spec
