"""The native side's entry points the hooks look for."""

_oom_observers = []


def _cuda_attach_out_of_memory_observer(observer):
    _oom_observers.append(observer)
