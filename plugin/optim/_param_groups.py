"""``param_groups`` and ``defaults`` for :class:`plugin.optim.DistributedOptimizer`, so that
``torch.optim.lr_scheduler`` classes drive it as they drive a ``torch.optim`` optimizer: they check
``isinstance(optimizer, torch.optim.Optimizer)``, read and write ``optimizer.param_groups[i][key]``
(``'lr'``; ``'momentum'`` or ``'betas'`` for the cyclic schedulers, which also read
``optimizer.defaults``) and wrap ``optimizer.step``. The values live on the owners;
:class:`DistributedParamGroup` is their local face, read from the owners on first use.
"""
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from functional_optim.configuration import TUPLE_HYPERPARAMETERS, copy_tensors, holds_tensor, split_values, torch_group
from functional_optim.torch_optimizer import WriteThroughDict

from ._owners import wait_all

__all__ = ["DistributedParamGroup", "fetch_group", "functional_values"]


# --- on the caller ------------------------------------------------------------------------


class DistributedParamGroup(WriteThroughDict):
    """The parameter group of a :class:`~plugin.optim.DistributedOptimizer`, as a dict.

    Keys: ``'params'`` (the ``params_rref`` list; read-only), every hyperparameter and flag of
    the optimizer under ``torch.optim``'s name and in its form (``'lr'``, ``'betas'`` as a
    tuple, ``'maximize'``, ...), and whatever else is stored in it (a scheduler's
    ``'initial_lr'``).

    Assigning a hyperparameter or flag sends it to every owner (one RPC each, in parallel)
    and returns once all have it, so the next step uses it everywhere; an unchanged value is
    not sent. Each owner validates it as the optimizer's constructor does.

    A hyperparameter the owners follow as a Tensor (``lr=torch.tensor(0.01)``) shows as a
    Tensor (a copy here, of the owners' dtype), as ``torch.optim`` keeps it: a scheduler
    changes it in place (``fill_``), and the optimizer sends the new value, as a Tensor, before
    its next step (:meth:`push_tensor_changes`), so that the owners compute with it as
    ``torch.optim`` does (in the Tensor's dtype). Assigning a Tensor makes the owners follow a
    copy of it; assigning a number replaces it, as in ``torch.optim``.

    Raises (on assignment):
        TypeError: a value of the wrong type (a hyperparameter that is neither a Python number
            nor a Tensor, a tuple of the wrong length, a flag that is not a bool or None), before
            anything is sent.
        ValueError: the owners reject the value (``Invalid learning rate: -1.0``); the message
            names the first owner that did. Every owner validates before it changes anything.
        ValueError: replacing ``'params'``, or deleting a hyperparameter or flag.
    """

    def __init__(self, optimizer: Any, params: List[Any], fetched: Dict[str, Any], extras: Dict[str, Any]) -> None:
        super().__init__()
        self._optimizer = optimizer
        self._hparam_names = list(fetched["hparam_names"])
        self._option_names = list(fetched["option_names"])
        dict.__setitem__(self, "params", params)
        for key, value in fetched["group"].items():
            dict.__setitem__(self, key, value)
        self._known = set(fetched["group"])
        for key, value in extras.items():
            if key not in self._known and key != "params":
                dict.__setitem__(self, key, value)
        self._sent: Dict[str, Any] = {}
        for key, value in fetched["group"].items():
            self._note_sent(key, value)

    def _note_sent(self, key: str, value: Any) -> None:
        """Keeps what the owners hold of a Tensor-holding ``value`` (copies), for
        :meth:`push_tensor_changes`."""
        if holds_tensor(value):
            self._sent[key] = copy_tensors(value)
        else:
            self._sent.pop(key, None)

    def push_tensor_changes(self) -> None:
        """Sends the owners the Tensor hyperparameters changed in place since they last had
        them (a scheduler's ``fill_``), as Tensors; returns when all have them.

        Raises:
            ValueError, RuntimeError: as an assignment (an owner rejected the value, named).
        """
        for key, sent in list(self._sent.items()):
            value = dict.__getitem__(self, key)
            if _same_tensors(value, sent):
                continue
            hparams, options = self._functional({key: value})
            self._optimizer._set_group(hparams, options, f"{key!r} changed in place")
            self._note_sent(key, value)

    def _functional(self, values: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Optional[bool]]]:
        """``values`` (torch's names) by functional name, a Tensor (or a Tensor part of a tuple)
        kept as the Tensor."""
        hparams, options, _ = split_values(values, self._hparam_names, self._option_names)
        for key, value in values.items():
            parts = TUPLE_HYPERPARAMETERS.get(key) if isinstance(value, (tuple, list)) else None
            for name, part in (zip(parts, value) if parts else [(key, value)]):
                if isinstance(part, Tensor) and name in hparams:
                    hparams[name] = part
        return hparams, options

    def extras(self) -> Dict[str, Any]:
        """The keys that are not the optimizer's (a scheduler's ``'initial_lr'``...)."""
        return {k: v for k, v in self.items() if k not in self._known and k != "params"}

    def __setitem__(self, key: str, value: Any) -> None:
        if key == "params":
            raise ValueError("the parameters of a DistributedOptimizer's param group cannot be replaced")
        if key not in self._known:
            dict.__setitem__(self, key, value)
            return
        hparams, options = self._functional({key: value})
        stored = value if holds_tensor(value) else torch_group(hparams, options)[key]
        current = self[key]
        if not holds_tensor(stored) and not holds_tensor(current) and stored == current and type(stored) is type(current):
            return  # nothing changes on the owners
        self._optimizer._set_group(hparams, options, f"setting {key!r}")  # on every owner, checked first
        dict.__setitem__(self, key, stored)
        self._note_sent(key, stored)

    def __delitem__(self, key: str) -> None:
        if key == "params" or key in self._known:
            raise ValueError(f"'{key}' cannot be removed from a DistributedOptimizer's param group")
        dict.__delitem__(self, key)

    def pop(self, key: str, *default: Any) -> Any:
        if key == "params" or key in self._known:
            raise ValueError(f"'{key}' cannot be removed from a DistributedOptimizer's param group")
        return dict.pop(self, key, *default)



def _same_tensors(a: Any, b: Any) -> bool:
    """Whether two values (numbers, Tensors, tuples of them) are the same: Tensors of the same
    dtype and elements, equal numbers."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b)
                and all(_same_tensors(x, y) for x, y in zip(a, b)))
    return a == b


def fetch_group(optimizer: Any) -> Dict[str, Any]:
    """Reads the group from every owner (in parallel) and checks that they agree."""
    futures = OrderedDict((name, owner.hyperparameters()) for name, owner in optimizer._owners.items())
    fetched = wait_all(futures, "reading the hyperparameters")
    first_owner, first = next(iter(fetched.items()))
    for owner, other in fetched.items():
        group, first_group = other["group"], first["group"]
        if list(group) != list(first_group) or not all(_same_tensors(group[k], first_group[k]) for k in group):
            raise RuntimeError(
                f"DistributedOptimizer: the hyperparameters of owner {owner!r} differ from those of {first_owner!r}"
            )
    return first


def functional_values(fetched: Dict[str, Any]) -> Tuple[Dict[str, float], Dict[str, Optional[bool]]]:
    """An owner's group (``_local.group_of``'s form) as its hyperparameters and flags by
    functional name (tuples split, every hyperparameter a float)."""
    hparams, options, _ = split_values(fetched["group"], fetched["hparam_names"], fetched["option_names"])
    return hparams, options
