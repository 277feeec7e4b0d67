"""Run an optimizer as TorchScript: a generic ScriptModule that holds it and forwards the protocol.

``torch.jit.script`` compiles our optimizer classes as TorchScript classes. A ScriptModule can
hold an instance as an attribute and call it from exported methods, which is how the
distributed optimizer runs steps without the GIL. :class:`OptimizerModule` is that module,
written once for all optimizer classes: it forwards ``step``, ``step_param`` and every
state-protocol method (see :mod:`functional_optim.state_protocol`), so
``state_protocol.state_dict(module)`` and ``load_state_dict(module, sd)`` work on it.

Notes:

* Reading ``module.optim`` from Python returns a *copy* of the TorchScript object (its tensors
  are shared, its dicts and lists are not); change the optimizer through the module's methods.
  Likewise, passing an eager optimizer into a scripted function works on a copy of its
  containers for the duration of that call: state created during the call is not kept.
* A TorchScript hazard for code that calls the functional forms (``functional_optim.adam.adam``
  ...) from its own scripted functions: TorchScript's dead-code elimination (seen on torch
  2.13) drops an in-place list op such as ``torch._foreach_add_`` when every list it mutates
  is a list built inside the same graph and not used afterwards, even though the list's
  elements are live tensors. Pass lists that are function inputs or attributes (as the
  optimizer classes do; see ``functional_optim._state.take``), or use the lists afterwards.
"""
from typing import Any, Dict, List, Optional

import torch
from torch import Tensor

from . import _jit

__all__ = ["OptimizerModule", "script_optimizer", "script_class"]


class OptimizerModule(torch.nn.Module):
    """An ``nn.Module`` holding one functional optimizer; script it with :func:`script_optimizer`.

    Args:
        optimizer: an instance of one of this package's optimizer classes (constructed eagerly,
            so param-group dicts are allowed). After scripting, the module's copy shares the
            parameters and state tensors with ``optimizer`` but not its hyperparameters.

    ``forward(gradients)`` is ``step(gradients)``. All methods have the signatures listed in
    :mod:`functional_optim.state_protocol` and raise what the optimizer raises (as
    ``torch.jit.Error`` once scripted).
    """

    def __init__(self, optimizer: Any) -> None:
        super().__init__()
        self.optim = optimizer

    def forward(self, gradients: List[Optional[Tensor]]) -> None:
        self.optim.step(gradients)

    @torch.jit.export
    def step(self, gradients: List[Optional[Tensor]]) -> None:
        self.optim.step(gradients)

    @torch.jit.export
    def step_param(self, param: Tensor, grad: Optional[Tensor]) -> None:
        self.optim.step_param(param, grad)

    @torch.jit.export
    def param_group_indices(self) -> List[List[int]]:
        return self.optim.param_group_indices()

    @torch.jit.export
    def hyperparameters(self) -> List[Dict[str, float]]:
        return self.optim.hyperparameters()

    @torch.jit.export
    def options(self) -> List[Dict[str, Optional[bool]]]:
        return self.optim.options()

    @torch.jit.export
    def set_hyperparameter(self, group: int, name: str, value: float) -> None:
        self.optim.set_hyperparameter(group, name, value)

    @torch.jit.export
    def set_option(self, group: int, name: str, value: Optional[bool]) -> None:
        self.optim.set_option(group, name, value)

    @torch.jit.export
    def set_group(self, group: int, hyperparameters: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
        self.optim.set_group(group, hyperparameters, options)

    @torch.jit.export
    def get_state(self) -> Dict[int, Dict[str, Tensor]]:
        return self.optim.get_state()

    @torch.jit.export
    def set_state(self, state: Dict[int, Dict[str, Tensor]]) -> None:
        self.optim.set_state(state)


def script_class(cls: type) -> type:
    """Compile an optimizer class for TorchScript (idempotent; no deprecation warning)."""
    return _jit.script(cls)


def script_optimizer(optimizer: Any) -> torch.jit.ScriptModule:
    """Return a scripted :class:`OptimizerModule` holding ``optimizer``.

    The first call for a class compiles it (a fraction of a second); later calls reuse the
    compiled class and module type.

    Raises:
        RuntimeError: if the class cannot be compiled by TorchScript.
    """
    script_class(type(optimizer))
    return _jit.script(OptimizerModule(optimizer))
