"""`torch.nn` as far as the hooks use it: `Module`, whose calls run torch's global forward
hooks (`torch.nn.modules.module.register_module_forward_pre_hook` / `_forward_hook`)."""

from . import modules  # noqa: F401
from .modules.module import Module  # noqa: F401
