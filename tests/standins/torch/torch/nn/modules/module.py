"""A module whose `__call__` runs the global forward pre-hooks, `forward`, then the global
forward hooks (those registered with `always_call=True` also when `forward` raises), as
torch's `Module._call_impl` does."""

import itertools

_global_forward_pre_hooks = {}
_global_forward_hooks = {}
_global_forward_hooks_always_called = {}
_ids = itertools.count()


class RemovableHandle:
    def __init__(self, *dicts):
        self.id = next(_ids)
        self.dicts = dicts

    def remove(self):
        for d in self.dicts:
            d.pop(self.id, None)


def register_module_forward_pre_hook(hook):
    handle = RemovableHandle(_global_forward_pre_hooks)
    _global_forward_pre_hooks[handle.id] = hook
    return handle


def register_module_forward_hook(hook, *, with_kwargs=False, always_call=False):
    handle = RemovableHandle(_global_forward_hooks, _global_forward_hooks_always_called)
    _global_forward_hooks[handle.id] = hook
    if always_call:
        _global_forward_hooks_always_called[handle.id] = True
    return handle


class Module:
    def forward(self, *args):
        raise NotImplementedError

    def __call__(self, *args):
        for hook in list(_global_forward_pre_hooks.values()):
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        try:
            output = self.forward(*args)
        except BaseException:
            for key, hook in list(_global_forward_hooks.items()):
                if key in _global_forward_hooks_always_called:
                    hook(self, args, None)
            raise
        for hook in list(_global_forward_hooks.values()):
            result = hook(self, args, output)
            if result is not None:
                output = result
        return output
