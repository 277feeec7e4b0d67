"""The one place where this package calls ``torch.jit.script``.

torch 2.13 marks ``torch.jit.script`` as deprecated and warns on every call. The optimizers of
this package are written to be scripted (the distributed optimizer runs their steps as
TorchScript, without the GIL), so scripting them is intended use, and the warning would only
confuse our users. :func:`script` silences exactly that warning, around exactly that call; every
other warning, including other deprecation warnings raised while compiling, passes through.
"""
import inspect
import warnings
from typing import Any

import torch

__all__ = ["script"]

# torch 2.13 says "`torch.jit.script` is deprecated. Please switch to ...". Match loosely so a
# rewording (or the back-quotes going away) still matches, but only for torch.jit.script.
_SCRIPT_DEPRECATION = r".*torch\.jit\.script`? is deprecated"


def script(obj: Any) -> Any:
    """Return ``torch.jit.script(obj)`` without its deprecation warning.

    Args:
        obj: a function, a TorchScript-compatible class, or an ``nn.Module`` instance.

    Returns:
        What ``torch.jit.script`` returns: a ``ScriptFunction``, the class itself (now
        registered with TorchScript), or a ``RecursiveScriptModule``.

    Raises:
        Whatever ``torch.jit.script`` raises (``RuntimeError`` / ``torch.jit.frontend.NotSupportedError``
        for code TorchScript cannot compile).
    """
    rcb = None
    if inspect.isclass(obj):
        # For a class, torch.jit.script resolves names in the *caller's* frame (here), not in
        # the class's module; resolve them in the module of the class's methods instead, as
        # TorchScript does when it compiles a class it meets as a module attribute.
        rcb = torch._jit_internal.createResolutionCallbackForClassMethods(obj)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_SCRIPT_DEPRECATION, category=DeprecationWarning)
        return torch.jit.script(obj, _rcb=rcb)
