"""Registry from ``torch.optim`` classes to this package's functional optimizers.

Like ``torch.distributed.optim.utils.functional_optim_map``: code that is handed a
``torch.optim`` class (``DistributedOptimizer(torch.optim.Adam, ...)``) looks up the class that
can run as TorchScript. All fourteen built-in pairs are registered at import; other libraries can add
theirs with :func:`register_functional_optimizer`.
"""
from typing import Dict, Optional

import torch

from .adadelta import Adadelta
from .adafactor import Adafactor
from .adagrad import Adagrad
from .adam import Adam
from .adamax import Adamax
from .adamw import AdamW
from .asgd import ASGD
from .muon import Muon
from .nadam import NAdam
from .radam import RAdam
from .rmsprop import RMSprop
from .rprop import Rprop
from .sgd import SGD
from .sparse_adam import SparseAdam

__all__ = ["register_functional_optimizer", "functional_optimizer_for", "torch_optimizer_for", "registered_optimizers"]

_REGISTRY: Dict[type, type] = {}


def register_functional_optimizer(optim_class: type, functional_class: type) -> None:
    """Map ``optim_class`` (e.g. a ``torch.optim.Optimizer`` subclass) to ``functional_class``.

    Args:
        optim_class: the user-facing optimizer class.
        functional_class: a class with this package's interface (``step(gradients)`` and the
            state protocol of :mod:`functional_optim.state_protocol`).

    Raises:
        TypeError: either argument is not a class, or ``functional_class`` lacks a protocol method.
        ValueError: ``optim_class`` is already mapped to a different class.
    """
    from .state_protocol import PROTOCOL_METHODS

    if not isinstance(optim_class, type) or not isinstance(functional_class, type):
        raise TypeError("register_functional_optimizer takes two classes")
    missing = [m for m in PROTOCOL_METHODS if not callable(getattr(functional_class, m, None))]
    if missing:
        raise TypeError(f"{functional_class.__name__} lacks the protocol methods {missing}")
    current = _REGISTRY.get(optim_class)
    if current is not None and current is not functional_class:
        raise ValueError(
            f"{optim_class.__qualname__} is already mapped to {current.__module__}.{current.__qualname__}"
        )
    _REGISTRY[optim_class] = functional_class


def functional_optimizer_for(optim_class: type) -> type:
    """Return the functional class for ``optim_class``.

    Args:
        optim_class: a registered ``torch.optim`` class (``torch.optim.Adam``) or one of the
            registered functional classes itself (returned unchanged).

    Returns:
        type: the functional class, which runs eagerly and as TorchScript.

    Raises:
        KeyError: the class is neither registered nor a registered functional class; the
            message lists the registered classes.
    """
    if optim_class in _REGISTRY:
        return _REGISTRY[optim_class]
    if optim_class in _REGISTRY.values():
        return optim_class
    names = sorted(c.__qualname__ for c in _REGISTRY)
    raise KeyError(
        f"no functional optimizer registered for {getattr(optim_class, '__qualname__', optim_class)!r}; "
        f"registered: {names} (add one with register_functional_optimizer)"
    )


def torch_optimizer_for(functional_class: type) -> Optional[type]:
    """The ``torch.optim`` class that this package's ``functional_class`` stands for.

    Args:
        functional_class (type): a class.

    Returns:
        Optional[type]: the registry's built-in pair's class (``functional_optim.Adam`` ->
        ``torch.optim.Adam``), or None for a class registered by a user or not registered.

    Raises nothing.
    """
    return _BUILTIN.get(functional_class)


def registered_optimizers() -> Dict[type, type]:
    """A copy of the current mapping.

    Returns:
        Dict[type, type]: user-facing class -> functional class, for every registered pair (the
        fourteen ``torch.optim`` classes, and any added with :func:`register_functional_optimizer`).

    Raises nothing.
    """
    return dict(_REGISTRY)


# THE list of built-in optimizers: torch.optim's class -> this package's.
_BUILTIN_PAIRS = [
    (torch.optim.SGD, SGD),
    (torch.optim.Adam, Adam),
    (torch.optim.AdamW, AdamW),
    (torch.optim.Adagrad, Adagrad),
    (torch.optim.RMSprop, RMSprop),
    (torch.optim.Adamax, Adamax),
    (torch.optim.Adadelta, Adadelta),
    (torch.optim.Rprop, Rprop),
    (torch.optim.NAdam, NAdam),
    (torch.optim.RAdam, RAdam),
    (torch.optim.SparseAdam, SparseAdam),
    (torch.optim.ASGD, ASGD),
    (torch.optim.Adafactor, Adafactor),
    (torch.optim.Muon, Muon),
]
_BUILTIN: Dict[type, type] = {ours: torch_class for torch_class, ours in _BUILTIN_PAIRS}
for _torch_class, _ours in _BUILTIN_PAIRS:
    register_functional_optimizer(_torch_class, _ours)
del _torch_class, _ours
