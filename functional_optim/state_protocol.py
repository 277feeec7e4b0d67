r"""The state protocol, and torch-format ``state_dict`` built on it alone.

Every optimizer class of this package (``SGD``, ``Adam``, ``Adagrad``, ``AdamW``, ``RMSprop``,
``Adamax``, ``Adadelta``, ``Rprop``, ``NAdam``, ``RAdam``, ``SparseAdam``, ``ASGD``,
``Adafactor``, ``Muon``) has the methods below, compiled by TorchScript and with the same
signatures in all of them. A ScriptModule that holds any of
them as an attribute can forward them (:class:`functional_optim.scripting.OptimizerModule` does),
so code that only sees the module (the distributed optimizer, across RPC) can export and import
the full optimizer state and change hyperparameters. Reading ``module.optim`` from Python would
only give a *copy* of the TorchScript object, so go through these methods instead.

Indices are *flat parameter indices*: the parameters numbered group after group, in the order
they were given, which is exactly the numbering of ``torch.optim``'s ``state_dict``.

Protocol methods (``Tensor`` is ``torch.Tensor``)::

    step(gradients: List[Optional[Tensor]]) -> None
        One step; gradients[i] belongs to flat parameter i, None skips it.
    step_param(param: Tensor, grad: Optional[Tensor]) -> None
        One step of one parameter (found by identity) with its group's hyperparameters.
    param_group_indices() -> List[List[int]]
        The flat parameter indices of each group.
    hyperparameters() -> List[Dict[str, float]]
        Each group's numeric hyperparameters (copies), named as in the functional form:
        tuples are split ('betas' -> 'beta1', 'beta2'; 'etas' -> 'etaminus', 'etaplus';
        'step_sizes' -> 'step_size_min', 'step_size_max'; Muon's 'ns_coefficients' ->
        'ns_a', 'ns_b', 'ns_c'; Adafactor's 'eps' -> 'eps1', 'eps2'); values torch keeps
        otherwise are floats too: an int as its value (Muon's 'ns_steps'), None as -inf
        (Adafactor's 'eps1'), a string as its number (Muon's 'adjust_lr_fn': 0 None,
        1 'original', 2 'match_rms_adamw').
    options() -> List[Dict[str, Optional[bool]]]
        Each group's flags (copies): 'maximize', 'foreach', 'fused', 'amsgrad', ... as torch
        names them; 'foreach' and 'fused' may be None (= torch's default choice).
    set_hyperparameter(group: int, name: str, value: float) -> None
    set_option(group: int, name: str, value: Optional[bool]) -> None
    set_group(group: int, hyperparameters: Dict[str, float],
              options: Dict[str, Optional[bool]]) -> None
        Change some of a group's values at once. The new values are validated together
        (torch's conditions and messages), and nothing changes if they are invalid. They are
        used from the next step on.
    get_state() -> Dict[int, Dict[str, Tensor]]
        Per-parameter state keyed by flat index, with torch's keys, shapes and dtypes
        (e.g. Adam: 'step' float32 0-dim, 'exp_avg', 'exp_avg_sq', ['max_exp_avg_sq']).
        Parameters that have not stepped yet are absent, as in torch. The dicts are new; the
        tensors are the live state (like torch's state_dict, which does not copy).
    set_state(state: Dict[int, Dict[str, Tensor]]) -> None
        Replace all per-parameter state with copies of ``state``, cast like
        ``torch.optim.Optimizer.load_state_dict`` casts ('step' keeps its dtype unless the
        group is fused; other tensors take the parameter's dtype and device). Raises
        ValueError, changing nothing, for an unknown index or a tensor of the wrong shape.

All of them raise ``ValueError`` (``torch.jit.Error`` when run as TorchScript) for a group index
or a name the optimizer does not have.

:func:`state_dict` and :func:`load_state_dict` convert between that protocol and
``torch.optim``'s format, ``{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}``,
so they work the same on an eager optimizer and on a ScriptModule forwarding the protocol.
"""
import itertools
from typing import Any, Dict, Optional

import torch

from ._param_groups import split_values
from .configuration import torch_group

__all__ = ["PROTOCOL_METHODS", "state_dict", "load_state_dict"]

#: Names of the protocol methods every optimizer class (and OptimizerModule) provides.
PROTOCOL_METHODS = (
    "step",
    "step_param",
    "param_group_indices",
    "hyperparameters",
    "options",
    "set_hyperparameter",
    "set_option",
    "set_group",
    "get_state",
    "set_state",
)


def state_dict(optimizer: Any) -> Dict[str, Any]:
    """Return ``optimizer``'s state in ``torch.optim``'s ``state_dict`` format.

    Args:
        optimizer: any object with the protocol methods: one of this package's optimizers
            (eager or scripted) or a ScriptModule forwarding them.

    Returns:
        Dict[str, Any]: ``{'state': {flat_index: {key: Tensor}}, 'param_groups': [{name: value, ...,
        'params': [flat indices]}]}`` with torch's hyperparameter names and forms (pairs as
        tuples). As with torch, the state tensors are the optimizer's own, not copies: clone
        (or ``copy.deepcopy``) the result before stepping if you need a snapshot.

    Raises nothing for this package's optimizers and :class:`~functional_optim.OptimizerModule`;
    another object raises what its protocol methods raise.
    """
    hparams = optimizer.hyperparameters()
    options = optimizer.options()
    groups = []
    for g, indices in enumerate(optimizer.param_group_indices()):
        group = torch_group(hparams[g], options[g])
        group["params"] = list(indices)
        groups.append(group)
    state = {int(i): dict(entry) for i, entry in optimizer.get_state().items()}
    return {"state": state, "param_groups": groups}


def load_state_dict(optimizer: Any, state_dict: Dict[str, Any]) -> None:
    """Load a ``torch.optim``-format state dict into ``optimizer`` through the protocol.

    A state dict saved from the matching ``torch.optim`` class loads here and vice versa. As in
    torch, saved parameter ids are matched to this optimizer's parameters by position, group by
    group, and each group's saved hyperparameters replace the current ones (keys this optimizer
    does not know, such as a scheduler's ``'initial_lr'``, are ignored). State tensors are copied
    and cast as torch casts them; an old-style number ``'step'`` becomes a tensor.

    Args:
        optimizer: any object with the protocol methods (see :func:`state_dict`).
        state_dict (Dict[str, Any]): ``{'state': {index: {key: Tensor}}, 'param_groups':
            [...]}``; state tensors are copied to each parameter's device and dtype.

    Raises:
        ValueError: a different number of groups or of parameters in a group (torch's messages),
            invalid hyperparameters, or a state tensor whose shape does not fit its parameter.
            On any error the optimizer is left exactly as it was.
    """
    indices = optimizer.param_group_indices()
    saved_groups = state_dict["param_groups"]
    if len(indices) != len(saved_groups):
        raise ValueError("loaded state dict has a different number of parameter groups")
    if any(len(g) != len(s["params"]) for g, s in zip(indices, saved_groups)):
        raise ValueError(
            "loaded state dict contains a parameter group that doesn't match the size of optimizer's group"
        )
    id_map = dict(
        zip(
            itertools.chain.from_iterable(s["params"] for s in saved_groups),
            itertools.chain.from_iterable(indices),
        )
    )
    new_state: Dict[int, Dict[str, torch.Tensor]] = {}
    for saved_id, entry in state_dict["state"].items():
        if saved_id not in id_map:
            continue
        converted = {}
        for key, value in entry.items():
            if not isinstance(value, torch.Tensor):
                if key != "step" and key != "mu_product":
                    raise ValueError(f"state[{saved_id}]['{key}'] is not a tensor: {value!r}")
                value = torch.tensor(float(value))
            converted[key] = value
        new_state[id_map[saved_id]] = converted

    current_hparams = optimizer.hyperparameters()
    current_options = optimizer.options()
    updates = []
    for g, saved in enumerate(saved_groups):
        values = {k: v for k, v in saved.items() if k != "params"}
        h, o, _ = split_values(values, current_hparams[g].keys(), current_options[g].keys())
        updates.append((h, o))

    # set_group and set_state each validate before changing anything; if a later call fails,
    # put the groups that were already changed back.
    try:
        for g, (h, o) in enumerate(updates):
            optimizer.set_group(g, h, o)
        optimizer.set_state(new_state)
    except BaseException:
        for g in range(len(indices)):
            optimizer.set_group(g, current_hparams[g], current_options[g])
        raise
