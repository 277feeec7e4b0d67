"""Methods that every optimizer class shares verbatim, written once.

TorchScript classes cannot inherit, so each optimizer class binds these functions in its body
(``get_state = _methods.get_state``); TorchScript compiles them as methods of that class. Each
class writes its own ``__init__``, ``step``, ``step_param`` and ``set_group`` (the parts that
depend on the algorithm); everything else of the state protocol (see
:mod:`functional_optim.state_protocol`) and the eager-only conveniences live here.
"""
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import state_protocol

__all__ = [
    "param_group_indices", "hyperparameters", "options", "set_hyperparameter", "set_option",
    "get_state", "set_state", "state_dict", "load_state_dict", "eager_defaults", "eager_parse",
    "eager_attach", "eager_repr",
]


def param_group_indices(self) -> List[List[int]]:
    """The flat parameter indices of each group (group ``g`` is ``param_groups[g]``)."""
    return self._s.group_indices()


def hyperparameters(self) -> List[Dict[str, float]]:
    """Copies of each group's numeric hyperparameters, named as in the functional form
    (``lr``, ``beta1``/``beta2`` for ``betas``, ...)."""
    return self._s.hyperparameters()


def options(self) -> List[Dict[str, Optional[bool]]]:
    """Copies of each group's flags (``maximize``, ``foreach``, ``fused``, ...; ``foreach`` and
    ``fused`` may be None)."""
    return self._s.get_options()


def set_hyperparameter(self, group: int, name: str, value: float) -> None:
    """Set one numeric hyperparameter of one group; validated like the constructor, used from
    the next step. Raises ValueError (nothing changes) for an invalid value, group or name."""
    options: Dict[str, Optional[bool]] = {}
    self.set_group(group, {name: value}, options)


def set_option(self, group: int, name: str, value: Optional[bool]) -> None:
    """Set one flag of one group; validated, used from the next step. Raises ValueError or
    RuntimeError (nothing changes) for an invalid combination, group or name."""
    hparams: Dict[str, float] = {}
    self.set_group(group, hparams, {name: value})


def get_state(self) -> Dict[int, Dict[str, Tensor]]:
    """Per-parameter state keyed by flat index: torch's keys, shapes and dtypes. The dicts are
    new, the tensors are the optimizer's own (as in ``torch.optim``'s ``state_dict``)."""
    return self._s.get_state()


def set_state(self, state: Dict[int, Dict[str, Tensor]]) -> None:
    """Replace all per-parameter state with copies of ``state``, cast as torch's
    ``load_state_dict`` casts. Raises ValueError (nothing changes) for an unknown index or a
    tensor whose shape does not fit its parameter."""
    self._s.set_state(state)


@torch.jit.unused
def state_dict(self) -> Dict[str, Any]:
    """Eager only: the state in the matching ``torch.optim`` class's ``state_dict`` format.

    Besides what the protocol gives (:func:`functional_optim.state_protocol.state_dict`), each
    group carries the extra keys of ``param_groups`` (e.g. a scheduler's ``'initial_lr'``), as
    torch's does.
    """
    result = state_protocol.state_dict(self)
    for group, packed in zip(self.param_groups, result["param_groups"]):
        params = packed.pop("params")
        for key, value in group.items():
            if key not in packed and key != "params":
                packed[key] = value
        packed["params"] = params
    return result


@torch.jit.unused
def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
    """Eager only: load a state dict saved from the matching ``torch.optim`` class or from this
    class (see :func:`functional_optim.state_protocol.load_state_dict`); extra group keys such
    as ``'initial_lr'`` go into ``param_groups``."""
    state_protocol.load_state_dict(self, state_dict)
    for group, saved in zip(self.param_groups, state_dict["param_groups"]):
        for key, value in saved.items():
            if key not in group:
                dict.__setitem__(group, key, value)


@torch.jit.unused
def eager_defaults(
    self, hparams: Dict[str, float], options: Dict[str, Optional[bool]]
) -> Tuple[Dict[str, float], Dict[str, Optional[bool]]]:
    """Eager only: coerce constructor arguments (ints to floats; Tensors are rejected)."""
    from ._param_groups import split_values

    h, o, _ = split_values({**hparams, **options}, hparams.keys(), options.keys())
    return h, o


@torch.jit.unused
def eager_parse(
    self, params: List[Tensor], hparams: Dict[str, float], options: Dict[str, Optional[bool]]
) -> Tuple[List[List[Tensor]], List[Dict[str, float]], List[Dict[str, Optional[bool]]]]:
    """Eager only: accept a list of tensors or of torch-style param-group dicts."""
    from ._param_groups import parse

    groups, group_hparams, group_options, self._extras = parse(params, hparams, options)
    return groups, group_hparams, group_options


@torch.jit.unused
def eager_attach(self) -> None:
    """Eager only: create the torch-style ``param_groups`` list."""
    from ._param_groups import attach

    self.param_groups = attach(self, self._s.cache_params, self._extras)
    del self._extras


@torch.jit.unused
def eager_repr(self) -> str:
    lines = [f"{type(self).__name__} ("]
    for g, group in enumerate(getattr(self, "param_groups", [])):
        lines.append(f"Parameter Group {g}")
        lines.extend(f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params")
    return "\n".join(lines + [")"])
