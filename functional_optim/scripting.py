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
  optimizer classes do: the lists they keep per group, or, for Adafactor's parts by device and
  dtype, ``functional_optim._state.take``'s, which is its input when it selects everything), or
  use the lists afterwards.
"""
import inspect
from typing import Any, Dict, List, Optional

import torch
from torch import Tensor

__all__ = ["OptimizerModule", "script_optimizer", "script_class", "script"]


class OptimizerModule(torch.nn.Module):
    """An ``nn.Module`` holding one functional optimizer; script it with :func:`script_optimizer`.

    Args:
        optimizer: an instance of one of this package's optimizer classes (constructed eagerly,
            so param-group dicts are allowed). After scripting, the module's copy shares the
            parameters and state tensors with ``optimizer`` but not its hyperparameters.

    ``forward(gradients)`` is ``step(gradients)``. All methods have the signatures listed in
    :mod:`functional_optim.state_protocol` and raise what the optimizer raises (as
    ``torch.jit.Error`` once scripted).

    Raises nothing itself; its methods raise what the optimizer's raise (``torch.jit.Error``, a ``RuntimeError``, with the same message once scripted).
    """

    def __init__(self, optimizer: Any) -> None:
        super().__init__()
        self.optim = optimizer

    def forward(self, gradients: List[Optional[Tensor]]) -> None:
        """Calling the module is :meth:`step`: one optimizer step.

        Args:
            gradients (List[Optional[Tensor]]): as for :meth:`step`: per parameter, a tensor of
                its shape, dtype and device, or ``None``.

        Raises:
            ValueError, RuntimeError: as :meth:`step`; nothing is modified then.
        """
        self.optim.step(gradients)

    @torch.jit.export
    def step(self, gradients: List[Optional[Tensor]]) -> None:
        """One optimizer step: the held optimizer's ``step(gradients)``.

        Args:
            gradients (List[Optional[Tensor]]): one entry per parameter in flat order (group
                after group): a tensor of the parameter's shape, dtype and device, or ``None`` to
                skip that parameter.

        Raises:
            ValueError: wrong number of gradients, or a gradient whose shape, dtype or device
                differs from its parameter's (``torch.jit.Error``, a ``RuntimeError``, with the same message once scripted).
            RuntimeError: a gradient the optimizer does not take (sparse, ...).

        Nothing is modified when it raises.
        """
        self.optim.step(gradients)

    @torch.jit.export
    def step_param(self, param: Tensor, grad: Optional[Tensor]) -> None:
        """One step of one parameter: the held optimizer's ``step_param(param, grad)``.

        Args:
            param (Tensor): one of the optimizer's parameters (the same tensor object).
            grad (Optional[Tensor]): its gradient, of the parameter's shape, dtype and device;
                ``None`` does nothing.

        Raises:
            ValueError: ``param`` is not a parameter, or ``grad`` does not match it (``torch.jit.Error``, a ``RuntimeError``, with the same message once scripted).
            RuntimeError: a gradient the optimizer does not take (sparse, ...).
        """
        self.optim.step_param(param, grad)

    @torch.jit.export
    def param_group_indices(self) -> List[List[int]]:
        """The flat parameter indices of each group (the optimizer's ``param_group_indices()``).

        Returns:
            List[List[int]]: per group, the flat indices of its parameters.

        Raises nothing.
        """
        return self.optim.param_group_indices()

    @torch.jit.export
    def hyperparameters(self) -> List[Dict[str, float]]:
        """Copies of each group's numeric hyperparameters (the optimizer's ``hyperparameters()``).

        Returns:
            List[Dict[str, float]]: one new dict per group, pairs split (``beta1``, ``beta2``, ...).

        Raises nothing.
        """
        return self.optim.hyperparameters()

    @torch.jit.export
    def options(self) -> List[Dict[str, Optional[bool]]]:
        """Copies of each group's flags (the optimizer's ``options()``).

        Returns:
            List[Dict[str, Optional[bool]]]: one new dict per group (``maximize``, ``foreach``,
            ``fused``, ...; ``foreach`` and ``fused`` may be ``None``).

        Raises nothing.
        """
        return self.optim.options()

    @torch.jit.export
    def set_hyperparameter(self, group: int, name: str, value: float) -> None:
        """Set one numeric hyperparameter of one group from the next step on (validated).

        Args:
            group (int): index of the parameter group, from 0.
            name (str): a name that :meth:`hyperparameters` lists (``"lr"``, ``"beta1"``, ...).
            value (float): the new value, in the units of the constructor's argument.

        Raises:
            ValueError: no such group or name, or an invalid value; nothing changes (``torch.jit.Error``, a ``RuntimeError``, with the same message once scripted).
        """
        self.optim.set_hyperparameter(group, name, value)

    @torch.jit.export
    def set_option(self, group: int, name: str, value: Optional[bool]) -> None:
        """Set one flag of one group from the next step on (validated).

        Args:
            group (int): index of the parameter group, from 0.
            name (str): a name that :meth:`options` lists (``"maximize"``, ``"foreach"``, ...).
            value (Optional[bool]): the new value (``None`` only for ``foreach`` and ``fused``).

        Raises:
            ValueError: no such group or name, or an invalid value; nothing changes (``torch.jit.Error``, a ``RuntimeError``, with the same message once scripted).
            RuntimeError: an invalid combination of ``fused`` and ``foreach`` (torch's message).
        """
        self.optim.set_option(group, name, value)

    @torch.jit.export
    def set_group(self, group: int, hyperparameters: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
        """Change several values of one group at once, validated together, from the next step on.

        Args:
            group (int): index of the parameter group, from 0.
            hyperparameters (Dict[str, float]): new numeric values by name (may be empty).
            options (Dict[str, Optional[bool]]): new flags by name (may be empty).

        Raises:
            ValueError: no such group or name, or invalid values; nothing changes (``torch.jit.Error``, a ``RuntimeError``, with the same message once scripted).
            RuntimeError: an invalid combination of ``fused`` and ``foreach`` (torch's message).
        """
        self.optim.set_group(group, hyperparameters, options)

    @torch.jit.export
    def get_state(self) -> Dict[int, Dict[str, Tensor]]:
        """Per-parameter state keyed by flat index (the optimizer's ``get_state()``).

        Returns:
            Dict[int, Dict[str, Tensor]]: torch's keys, shapes, dtypes and devices (most tensors
            like their parameter; ``'step'`` a 0-dim float32 tensor). The dicts are new, the
            tensors are the optimizer's own.

        Raises nothing.
        """
        return self.optim.get_state()

    @torch.jit.export
    def set_state(self, state: Dict[int, Dict[str, Tensor]]) -> None:
        """Replace all per-parameter state with copies of ``state`` (the optimizer's ``set_state``).

        Args:
            state (Dict[int, Dict[str, Tensor]]): flat index -> ``{key: tensor}``; each tensor
                0-dim or of its parameter's shape; cast to the parameter's dtype and device as
                ``torch.optim`` casts loaded state.

        Raises:
            ValueError: an unknown index or a tensor of the wrong shape; nothing changes
                (``torch.jit.Error``, a ``RuntimeError``, with the same message once scripted).
        """
        self.optim.set_state(state)


def script(obj: Any) -> Any:
    """``torch.jit.script(obj)``, resolving a class's names in its own module: the one place
    this package (and the plugin) calls TorchScript's compiler. Nothing is scripted unless a
    user asks (:func:`script_optimizer`, :meth:`plugin.optim.ScriptLocalOptimizer.create`, a
    registered functional class stepped by a DistributedOptimizer). torch deprecates TorchScript
    (torch 2.13 warns with a ``DeprecationWarning``, 2.14 with a ``FutureWarning``, and
    pytorch/pytorch#189705 makes the call raise); its warning is not silenced.

    Args:
        obj: a function, a TorchScript-compatible class, or an ``nn.Module`` instance.

    Returns:
        Any: what ``torch.jit.script`` returns (a ``ScriptFunction``, the class itself, now
        registered with TorchScript, or a ``RecursiveScriptModule``).

    Raises:
        Whatever ``torch.jit.script`` raises (code TorchScript cannot compile; a
        ``RuntimeError`` where torch no longer compiles TorchScript).
    """
    rcb = None
    if inspect.isclass(obj):
        # For a class, torch.jit.script resolves names in the *caller's* frame (here), not in
        # the class's module; resolve them in the module of the class's methods instead, as
        # TorchScript does when it compiles a class it meets as a module attribute.
        rcb = torch._jit_internal.createResolutionCallbackForClassMethods(obj)
    return torch.jit.script(obj, _rcb=rcb)


def script_class(cls: type) -> type:
    """Compile an optimizer class for TorchScript (idempotent; no deprecation warning).

    Args:
        cls (type): a class written for TorchScript, such as :class:`functional_optim.Adam`.

    Returns:
        type: ``cls`` itself, now known to TorchScript.

    Raises:
        RuntimeError: TorchScript cannot compile the class (``torch.jit.frontend`` errors are
            ``RuntimeError`` subclasses).
    """
    return script(cls)


def script_optimizer(optimizer: Any) -> torch.jit.ScriptModule:
    """Return a scripted :class:`OptimizerModule` holding ``optimizer``.

    The first call for a class compiles it (a fraction of a second); later calls reuse the
    compiled class and module type.

    Args:
        optimizer: an instance of one of this package's optimizer classes (or of a class with
            the same protocol), built eagerly.

    Returns:
        torch.jit.ScriptModule: the module; its methods (``step``, the state protocol) run as
        TorchScript. It shares the parameters and state tensors with ``optimizer``.

    Raises:
        RuntimeError: if the class cannot be compiled by TorchScript.
    """
    script_class(type(optimizer))
    return script(OptimizerModule(optimizer))
