"""The one place where this package calls ``torch.jit.script``.

Nothing is scripted unless a user asks (:func:`functional_optim.script_optimizer`,
:meth:`plugin.optim.ScriptLocalOptimizer.create`, a registered functional class stepped by a
DistributedOptimizer): TorchScript is optional here. torch deprecates it (torch 2.13 warns with
a ``DeprecationWarning`` on every ``torch.jit.script``, torch 2.14 with a visible
``FutureWarning``, and pytorch/pytorch#189705 makes the call raise), so its warning is not
silenced: a user who asks for TorchScript hears torch's own word on it.
"""
import inspect
from typing import Any

import torch

__all__ = ["script"]


def script(obj: Any) -> Any:
    """Return ``torch.jit.script(obj)``, resolving a class's names in its own module.

    Args:
        obj: a function, a TorchScript-compatible class, or an ``nn.Module`` instance.

    Returns:
        What ``torch.jit.script`` returns: a ``ScriptFunction``, the class itself (now
        registered with TorchScript), or a ``RecursiveScriptModule``.

    Raises:
        Whatever ``torch.jit.script`` raises (``RuntimeError`` / ``torch.jit.frontend.NotSupportedError``
        for code TorchScript cannot compile; a ``RuntimeError`` where torch no longer compiles
        TorchScript).
    """
    rcb = None
    if inspect.isclass(obj):
        # For a class, torch.jit.script resolves names in the *caller's* frame (here), not in
        # the class's module; resolve them in the module of the class's methods instead, as
        # TorchScript does when it compiles a class it meets as a module attribute.
        rcb = torch._jit_internal.createResolutionCallbackForClassMethods(obj)
    return torch.jit.script(obj, _rcb=rcb)
