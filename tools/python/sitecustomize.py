"""vramtrace's start-up hook for Python programs (docs/pytorch.md).

`vramtrace run` puts the directory holding this file first on PYTHONPATH, so the interpreter's
`site` module imports it at start-up in place of any other `sitecustomize`. It runs that other
one first, exactly as `site` would have (its errors reach `site` unchanged), then puts a finder
on `sys.meta_path` that waits for `import torch`: only then is `vramtrace_hooks` imported. A
program that never imports torch pays one string comparison per import, nothing more.
"""


def _vramtrace_chain():
    """Runs the `sitecustomize` the interpreter would have found without vramtrace: the first one
    on `sys.path` outside every directory holding vramtrace's hooks (nested `vramtrace run`s put
    one such directory each)."""
    import os
    import sys
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    def ours(entry):
        return os.path.isfile(os.path.join(entry or os.curdir, "vramtrace_hooks.py"))

    path = [p for p in sys.path if isinstance(p, str) and not ours(p)]
    spec = PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    # The other module takes the name, as if it had been imported in our place.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


class _VramtraceTorchWatch:
    """Hands `import torch` to vramtrace_hooks, which hooks torch once it is imported."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            import vramtrace_hooks
        except Exception:
            return None
        return vramtrace_hooks.find_torch_spec(self, name, path, target)


def _vramtrace_install():
    import sys

    sys.meta_path.insert(0, _VramtraceTorchWatch())


try:
    _vramtrace_chain()
finally:
    _vramtrace_install()
