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
from typing import Any, Dict, List

import torch

from ._torch_face import TorchOptimizerFace
from .state_protocol import _torch_group

__all__ = ["as_torch_optimizer", "TorchOptimizer"]


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
