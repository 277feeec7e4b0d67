"""A ``torch.optim.Optimizer`` face for an eager optimizer of this package, so that
``torch.optim.lr_scheduler`` drives it.

torch's learning-rate schedulers check ``isinstance(optimizer, torch.optim.Optimizer)``. The
optimizers of this package are TorchScript classes, which cannot inherit from it, so one line
wraps them::

    optimizer = functional_optim.as_torch_optimizer(functional_optim.Adam(params, lr=1e-3))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    optimizer.step(gradients)   # the wrapped optimizer's step
    scheduler.step()

The wrapper holds no state of its own: ``param_groups`` *is* the wrapped optimizer's list (whose
dicts validate and apply what a scheduler writes into them), and ``step``, ``state_dict`` and
``load_state_dict`` are the wrapped optimizer's.
"""
from collections import OrderedDict
from typing import Any, Dict, List

import torch

from ._param_groups import WriteThroughDict
from .configuration import torch_group as _torch_group

__all__ = ["as_torch_optimizer", "TorchOptimizer", "TorchOptimizerFace", "WriteThroughDict"]


# The part of the torch.optim.Optimizer face that TorchOptimizer and the plugin's
# DistributedOptimizer share: both are torch.optim.Optimizer subclasses (so that
# torch.optim.lr_scheduler drives them) whose gradients and state do not live where torch.optim
# keeps them: gradients are passed to step or read from a distributed autograd context, never
# from .grad; the state lives in a TorchScript object or on other workers; the parameter groups
# are fixed. A subclass lists it before torch.optim.Optimizer and sets the four messages; it
# calls _init_hooks where torch.optim.Optimizer.__init__ would have set up the hooks (that
# __init__ cannot run: it takes local leaf tensors).
class TorchOptimizerFace:
    """``zero_grad``, ``add_param_group``, ``state``, the state-dict hook registrations and
    pickling, for an optimizer whose gradients, state and groups ``torch.optim`` does not hold.

    Raises nothing itself (its members raise; see each).
    """

    # Set by each subclass: the messages of what it does not support.
    _STATE_ERROR = "the optimizer state is read with state_dict()"
    _ADD_PARAM_GROUP_ERROR = "add_param_group is not supported"
    _HOOKS_ERROR = "this optimizer does not run state_dict or load_state_dict hooks"
    _PICKLE_ERROR = "this optimizer cannot be pickled; save its state_dict() instead"

    def _init_hooks(self) -> None:
        # What torch.optim.Optimizer.__init__ sets up for its hooks; step() then runs torch's
        # step hooks (register_step_pre_hook, register_step_post_hook) as torch.optim's does.
        self._optimizer_step_pre_hooks = OrderedDict()
        self._optimizer_step_post_hooks = OrderedDict()
        self._optimizer_state_dict_pre_hooks = OrderedDict()
        self._optimizer_state_dict_post_hooks = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks = OrderedDict()
        self._optimizer_load_state_dict_post_hooks = OrderedDict()
        self._patch_step_function()

    @property
    def state(self):
        """Not available: the state lives in a TorchScript object (``as_torch_optimizer``) or on
        the owners (``DistributedOptimizer``), not in a ``torch.optim`` dict.

        Raises:
            AttributeError: always; read the state with ``state_dict()``.
        """
        raise AttributeError(self._STATE_ERROR)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Does nothing: ``.grad`` of the parameters is not used. The gradients are passed to
        ``step`` (``as_torch_optimizer``) or live in each distributed autograd context, which
        starts from zero (``DistributedOptimizer``). For code written for ``torch.optim``.

        Args:
            set_to_none (bool): ignored.

        Raises nothing.
        """

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Not supported: the parameter groups are fixed when the optimizer is built (a
        ``DistributedOptimizer`` has one).

        Args:
            param_group (Dict[str, Any]): ignored.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(self._ADD_PARAM_GROUP_ERROR)

    def _no_state_dict_hooks(self, hook: Any, prepend: bool = False) -> None:
        """Not supported (``register_state_dict_pre_hook``, ``register_state_dict_post_hook``,
        ``register_load_state_dict_pre_hook``, ``register_load_state_dict_post_hook``): the
        state dict is not built by ``torch.optim.Optimizer``'s code, which runs those hooks.

        Args:
            hook (Callable): ignored.
            prepend (bool): ignored.

        Raises:
            NotImplementedError: always (rather than a hook that would never run).
        """
        raise NotImplementedError(self._HOOKS_ERROR)

    register_state_dict_pre_hook = _no_state_dict_hooks
    register_state_dict_post_hook = _no_state_dict_hooks
    register_load_state_dict_pre_hook = _no_state_dict_hooks
    register_load_state_dict_post_hook = _no_state_dict_hooks

    def __getstate__(self):
        raise TypeError(self._PICKLE_ERROR)




class TorchOptimizer(TorchOptimizerFace, torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` that forwards to an eager ``functional_optim`` optimizer
    (build it with :func:`as_torch_optimizer`).

    Attributes:
        optimizer: the wrapped optimizer; :attr:`param_groups` is its ``param_groups`` list
            (the same list, not a copy).
        defaults (Dict[str, Any]): the first group's hyperparameters and flags at wrapping time,
            under ``torch.optim``'s names (``'betas'`` as a tuple): what ``OneCycleLR`` and
            ``CyclicLR`` look for.

    Step hooks (``register_step_pre_hook``...) run around :meth:`step`; :meth:`add_param_group`
    is the wrapped optimizer's; ``state`` is not available (the state lives in the TorchScript
    object) and raises; ``zero_grad`` does nothing (gradients are passed to ``step``).

    Args:
        optimizer: an eager optimizer of this package (see :func:`as_torch_optimizer`).

    Raises:
        TypeError: (constructor) ``optimizer`` has no ``param_groups`` (a scripted optimizer,
            or not an optimizer of this package).
    """

    _STATE_ERROR = "the state of a functional_optim optimizer is read with state_dict()"
    _HOOKS_ERROR = "as_torch_optimizer() does not run state_dict or load_state_dict hooks"
    _PICKLE_ERROR = "as_torch_optimizer() wrappers cannot be pickled; save state_dict() instead"

    def __init__(self, optimizer: Any) -> None:
        groups = getattr(optimizer, "param_groups", None)
        if not isinstance(groups, list) or not hasattr(optimizer, "hyperparameters"):
            raise TypeError(
                "as_torch_optimizer() takes an eager functional_optim optimizer (with param_groups), "
                f"got {type(optimizer).__name__}"
            )
        # torch.optim.Optimizer.__init__ would build param_groups from tensors; this object
        # shares the wrapped optimizer's instead, and sets the rest as it does.
        self.optimizer = optimizer
        self.defaults: Dict[str, Any] = _torch_group(optimizer.hyperparameters()[0], optimizer.options()[0])
        self._init_hooks()

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        """The wrapped optimizer's ``param_groups`` list."""
        return self.optimizer.param_groups

    def step(self, *args: Any, **kwargs: Any) -> None:
        """The wrapped optimizer's ``step`` (``step(gradients)``).

        Args:
            *args: as the wrapped ``step``: a list with one gradient (or None) per parameter.
            **kwargs: as the wrapped ``step``.

        Raises:
            What the wrapped ``step`` raises (ValueError, RuntimeError).
        """
        return self.optimizer.step(*args, **kwargs)

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """The wrapped optimizer's ``add_param_group`` (as ``torch.optim.Optimizer``'s).

        Args:
            param_group (Dict[str, Any]): ``{'params': [...], <hyperparameters>}``; the values
                it does not set are the wrapped optimizer's constructor's.

        Raises:
            TypeError, KeyError, ValueError, RuntimeError: as the wrapped ``add_param_group``
            (torch's messages); nothing changes then.
        """
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> Dict[str, Any]:
        """The wrapped optimizer's ``state_dict()`` (``torch.optim``'s format).

        Returns:
            Dict[str, Any]: as the wrapped optimizer's.

        Raises nothing.
        """
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """The wrapped optimizer's ``load_state_dict``.

        Args:
            state_dict (Dict[str, Any]): ``torch.optim``'s format.

        Raises:
            ValueError: as the wrapped optimizer's.
        """
        self.optimizer.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return f"as_torch_optimizer({self.optimizer!r})"


def as_torch_optimizer(optimizer: Any) -> TorchOptimizer:
    """Wraps an eager ``functional_optim`` optimizer as a ``torch.optim.Optimizer``, for
    ``torch.optim.lr_scheduler``.

    Use the wrapper in place of the optimizer (call its ``step(gradients)``), so that the
    schedulers see the steps. What a scheduler writes into ``param_groups`` (``'lr'``,
    ``'betas'``, ``'momentum'``) is validated and used from the next step on; other keys
    (``'initial_lr'``) are kept and saved by ``state_dict()``.

    Args:
        optimizer: an optimizer of this package built eagerly (``functional_optim.Adam(params)``),
            over any parameters.

    Returns:
        TorchOptimizer: a ``torch.optim.Optimizer`` sharing the optimizer's ``param_groups``.

    Raises:
        TypeError: ``optimizer`` is not an eager ``functional_optim`` optimizer.
    """
    return TorchOptimizer(optimizer)
