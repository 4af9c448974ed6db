from . import optimizer  # noqa: F401
from .optimizer import SGD, Optimizer  # noqa: F401

# As torch does: the submodule stays in sys.modules only.
del optimizer  # noqa: F821
