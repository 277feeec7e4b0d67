"""The native local optimizer: an owner's share of a :class:`~plugin.optim.DistributedOptimizer`
over one of the eleven built-in optimizers, stepped in C++ (``torch.classes.dist_engine.LocalOptimizer``,
``plugin/csrc/optim/local_optimizer.h``) through the fused kernels, without the GIL and without
TorchScript.

:class:`LocalOptimizer` builds a ``functional_optim`` eager instance first (its validation,
param-group parsing, Tensor hyperparameters and torch's messages), then the C++ object from that
instance's values, and keeps only the C++ object. Its methods call the C++ object's ops by its
handle (``torch.ops.dist_engine._optimizer_*``): the same ops another worker calls by RPC
(``plugin/csrc/rpc/rpc_functions.cpp``). Nothing here calls ``torch.jit``.
"""
import copy
import inspect
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

import functional_optim
from functional_optim import _kernels, _validation
from functional_optim._param_groups import TensorRules, split_values
from functional_optim._state import TUPLE_HYPERPARAMETERS
from functional_optim.state_protocol import _torch_group

from .. import ops  # noqa: F401  (loads the op library: torch.ops.dist_engine, torch.classes.dist_engine)

__all__ = ["LocalOptimizer"]

# The eleven built-in functional classes, by the name their kernels have (functional_optim._kernels.OPTIMIZERS).
_NAMES: Dict[type, str] = {
    functional_optim.SGD: "sgd", functional_optim.Adam: "adam", functional_optim.AdamW: "adamw",
    functional_optim.Adagrad: "adagrad", functional_optim.RMSprop: "rmsprop", functional_optim.Adamax: "adamax",
    functional_optim.Adadelta: "adadelta", functional_optim.Rprop: "rprop", functional_optim.NAdam: "nadam",
    functional_optim.RAdam: "radam", functional_optim.SparseAdam: "sparse_adam",
}


def _call(op: str, *args: Any) -> Any:
    """``torch.ops.dist_engine.<op>(*args)``, its error raised as the type its text begins with
    (the C++ writes ``"ValueError: ..."`` for the caller over RPC), without that prefix."""
    try:
        return getattr(torch.ops.dist_engine, op)(*args)
    except (ValueError, RuntimeError) as e:
        text = str(e)
        prefix = type(e).__name__ + ": "
        if text.startswith(prefix):
            raise type(e)(text[len(prefix):]) from None
        raise


def _steps_fused(options: Dict[str, Optional[bool]]) -> bool:
    """Whether a group with these flags steps through a fused kernel (fused=True, or foreach and
    fused both unset), as the C++ object requires of every group."""
    return options.get("fused") is True or (options.get("foreach") is None and options.get("fused") is None)


def _holds_tensor(value: Any) -> bool:
    return isinstance(value, Tensor) or (isinstance(value, tuple) and any(isinstance(v, Tensor) for v in value))


def _functional_names(tensors: Dict[str, Any]) -> Dict[str, Tensor]:
    """Tensor hyperparameters under torch's names (a pair may hold them) as functional names."""
    out: Dict[str, Tensor] = {}
    for key, value in tensors.items():
        halves = TUPLE_HYPERPARAMETERS.get(key)
        if halves is None:
            out[key] = value
        else:
            for half, v in zip(halves, value):
                if isinstance(v, Tensor):
                    out[half] = v
    return out



def state_entry_as_tensors(index: Any, entry: Dict[str, Any]) -> Dict[str, Tensor]:
    """One parameter's entry of a ``torch.optim`` state dict (``index`` its key there) as a
    native local optimizer loads it: every value a Tensor (an old-style number ``'step'`` or
    ``'mu_product'`` becomes a 0-dim float tensor, as ``functional_optim.load_state_dict``
    converts it).

    Raises:
        ValueError: another value that is not a tensor (its index and key named).
    """
    converted: Dict[str, Tensor] = {}
    for key, value in entry.items():
        if not isinstance(value, Tensor):
            if key != "step" and key != "mu_product":
                raise ValueError(f"state[{index}]['{key}'] is not a tensor: {value!r}")
            value = torch.tensor(float(value))
        converted[key] = value
    return converted

class LocalOptimizer:
    """One worker's share of a distributed optimizer, stepped natively (C++, the fused kernels).

    Holds a C++ ``torch.classes.dist_engine.LocalOptimizer`` over ``params``, reached by its
    :attr:`handle` (unique in the process); it lives as long as this object. Every call that
    reads or writes the parameters, their state or the hyperparameters holds the parameters'
    locks (per parameter, shared with every local optimizer of this process, waited for without
    the GIL); the steps run without the GIL and without TorchScript, locally and when another
    worker calls the same ops by RPC.

    Results are bitwise those of the ``functional_optim`` eager instance built with the same
    arguments: the same kernels in the same order (torch's fused kernels ``torch._fused_sgd_``,
    ``_fused_adam_``, ``_fused_adamw_``, ``_fused_adagrad_``; ``functional_optim``'s
    ``torch.ops.gilfree_optim.<name>_`` for RMSprop, Adamax, Adadelta, Rprop, NAdam, RAdam), the
    same state (keys, dtypes, devices, lazily created at a parameter's first step), the same
    checks and messages. Algorithms: ``torch.optim`` (the class of the same name), as the fused
    kernels implement them. Sparse (COO) gradients: SGD and Adagrad step them as
    ``functional_optim`` does (``torch.optim``'s single-tensor code, a contiguous CPU
    parameter's sparse gradient through the fused sparse kernel ``gilfree_optim::sparse_sgd_``
    without momentum and weight decay, ``sparse_adagrad_`` without weight decay); SparseAdam
    steps only sparse gradients (``gilfree_optim::sparse_adam_``, contiguous CPU parameters;
    a dense gradient raises torch's ``RuntimeError``); the others reject them.

    Args:
        functional_class (type): one of the eleven built-in ``functional_optim`` classes
            (``functional_optim.Adam``, ...).
        params: the parameters on this worker, as for ``torch.optim``: a list of leaf tensors
            (any shape; float32, float64, bfloat16 or float16; on the CPU, or CUDA for SGD,
            Adam, AdamW and Adagrad) or of param-group dicts.
        *args: the optimizer's positional hyperparameters, as for the class (numbers or
            1-element Tensors, which the steps follow).
        **kwargs: its keyword hyperparameters, likewise.

    Raises:
        ValueError: ``functional_class`` is not built in, a configuration that does not step
            through the fused kernels (:meth:`why_not_native` says why), or what the class's
            constructor raises (invalid hyperparameters, empty ``params``: torch's messages).
        TypeError, RuntimeError: what the class's constructor raises.
    """

    def __init__(self, functional_class: type, params: Any, *args: Any, **kwargs: Any) -> None:
        if functional_class not in _NAMES:
            raise ValueError(f"LocalOptimizer: {functional_class!r} is not one of the eleven built-in functional optimizers")
        _kernels.load()  # the C++ calls functional_optim's kernels through the dispatcher
        eager, real = _inspect(functional_class, params, args, kwargs)
        reason = _reason(eager, functional_class, real)
        if reason is not None:
            raise ValueError(f"LocalOptimizer: {functional_class.__name__} cannot step natively here: {reason}")
        s = eager._s
        self._class = functional_class
        self._name = s.name
        self._indices: List[List[int]] = s.group_indices()
        self._tensors: List[Dict[str, Tensor]] = [dict(t) for t in s.tensor_hparams]
        self._extras: List[Dict[str, Any]] = []
        for g, group in enumerate(eager.param_groups):
            known = _torch_group(s.hparams[g], s.options[g])
            self._extras.append({k: v for k, v in group.items() if k != "params" and k not in known})
        defaults = {"initial_accumulator_value": float(eager._fills["sum"])} if s.name == "adagrad" else {}
        self._object = torch.classes.dist_engine.LocalOptimizer(
            s.name, [[real[id(p)] for p in group] for group in s.cache_params], [dict(h) for h in s.hparams], [dict(o) for o in s.options],
            [dict(t) for t in s.tensor_hparams], defaults,
        )
        self._handle: int = self._object.handle()

    @staticmethod
    def why_not_native(functional_class: type, params: Any, *args: Any, **kwargs: Any) -> Optional[str]:
        """Why :class:`LocalOptimizer` cannot step this configuration, in words; ``None`` when it can.

        It can when ``functional_class`` is one of the eleven built-in classes and every param group
        steps through a fused kernel: ``functional_optim``'s default for dense floating-point
        parameters (every optimizer on the CPU; SGD, Adam, AdamW and Adagrad on CUDA), or
        ``fused=True``. Builds the eager instance to decide (``params`` must be a list, not an
        iterator, when the caller uses it again); arguments the constructor rejects give
        ``None``, so that the constructor raises its own error.

        Args:
            functional_class (type), params, *args, **kwargs: as for the constructor.

        Returns:
            Optional[str]: ``None``, or a reason such as ``"a functional class registered by the
            user"``, ``"foreach=True"``, ``"fused=False"``, ``"differentiable=True"``,
            ``"no fused kernel for RMSprop on cuda"``.

        Raises nothing.
        """
        if functional_class not in _NAMES:
            return "a functional class registered by the user"
        flags = _given_flags(functional_class, params, args, kwargs)
        for flag in ("differentiable", "capturable"):
            if flags.get(flag):
                return f"{flag}=True"
        try:
            eager, real = _inspect(functional_class, params, args, kwargs)
        except Exception:  # noqa: BLE001 (the constructor raises it again, with its message)
            return None
        return _reason(eager, functional_class, real)

    @property
    def handle(self) -> int:
        """The C++ object's handle in this process's registry (what the ops take first)."""
        return self._handle

    def accepts_sparse(self) -> bool:
        """Whether every param group takes sparse (COO) gradients.

        Returns:
            bool: True for SGD and Adagrad unless a group has ``fused=True`` (Adagrad: or
            ``weight_decay != 0``); False for the others.

        Raises nothing for a live optimizer.
        """
        return _call("_optimizer_accepts_sparse", self._handle)

    # --- steps ------------------------------------------------------------------------------

    def step(self, context_id: int) -> None:
        """Applies the gradients of distributed autograd context ``context_id`` on this worker
        (the plugin engine's, or torch's when only its engine ran); a parameter without one is
        skipped, and so is every parameter when this worker does not know the context.

        Args:
            context_id (int): a distributed autograd context id whose backward pass has ended.

        Raises:
            ValueError: a gradient whose shape, dtype or device differs from its parameter's
                (``functional_optim``'s message, naming the index). Nothing changes then.
            RuntimeError: a sparse gradient the optimizer does not take (torch's message).
        """
        _call("_optimizer_step", self._handle, context_id)

    def prepare_step(self, context_id: int, lease_ms: int) -> int:
        """Phase 1 of a step over several owners: reads and checks the context's gradients (as
        :meth:`step`) and keeps them for :meth:`commit_step`, at most ``lease_ms`` (> 0)
        milliseconds; changes nothing and takes no lock.

        Args:
            context_id (int): a distributed autograd context id whose backward pass has ended.
            lease_ms (int): how long, in milliseconds (> 0), the step waits for its commit.

        Returns:
            int: the token for :meth:`commit_step` or :meth:`drop_step`.

        Raises:
            ValueError, RuntimeError: as :meth:`step`, for the same gradients.
        """
        return _call("_optimizer_prepare", self._handle, context_id, lease_ms)

    def commit_step(self, token: int) -> None:
        """Phase 2: applies the gradients kept by :meth:`prepare_step` (checked again first).

        Args:
            token (int): from :meth:`prepare_step`.

        Raises:
            RuntimeError: the token is unknown here or its lease expired (nothing is applied).
            ValueError: as :meth:`step` (the values changed in between).
        """
        _call("_optimizer_commit", self._handle, token)

    def drop_step(self, token: int) -> bool:
        """Forgets a prepared step without applying it.

        Args:
            token (int): from :meth:`prepare_step`.

        Returns:
            bool: whether it was still prepared (False: unknown, taken or expired).

        Raises nothing for a live optimizer.
        """
        return _call("_optimizer_drop", self._handle, token)

    def step_checked(self, context_id: int, version: int, deadline_ms: int) -> int:
        """This owner's part of a checked step: applies the engine's gradients of the context if
        they are still at ``version`` (as the backward pass checked them), holding the locks,
        unless the system clock reached ``deadline_ms`` (milliseconds since the Unix epoch; -1:
        no deadline) by then.

        Args:
            context_id (int): the distributed autograd context id.
            version (int): this worker's version of the context's gradients as the backward
                pass checked them (``plugin.ops._checked_versions``).
            deadline_ms (int): milliseconds since the Unix epoch on the system clock, or -1.

        Returns:
            int: 0 applied; 1 the gradients changed since the check; 2 the deadline passed
            (nothing applied for 1 and 2).

        Raises:
            ValueError, RuntimeError: as :meth:`step` for bad gradients.
        """
        return _call("_optimizer_step_checked", self._handle, context_id, version, deadline_ms)

    def step_gradients(self, gradients: List[Optional[Tensor]]) -> None:
        """Applies ``gradients`` under the same locks as :meth:`step`.

        Args:
            gradients (List[Optional[Tensor]]): one per parameter, flat order (group after
                group): a tensor of the parameter's shape, dtype and device (sparse COO for SGD
                and Adagrad), or ``None`` to skip that parameter.

        Raises:
            ValueError: wrong number of gradients, or one whose shape, dtype or device differs
                from its parameter's (``functional_optim``'s messages). Nothing changes then.
            RuntimeError: a sparse gradient the group does not take (torch's message).
        """
        _call("_optimizer_step_gradients", self._handle, list(gradients))

    # --- state and values -------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The state in ``torch.optim``'s format, as the ``functional_optim`` eager instance's
        ``state_dict()`` gives it.

        Returns:
            Dict[str, Any]: ``{'state': {flat index: {key: Tensor}}, 'param_groups': [...]}``:
            torch's keys, shapes, dtypes and devices (``'step'`` float32 0-dim on the
            parameter's device), copies; each group with torch's names (pairs as tuples), a
            Tensor hyperparameter as the Tensor it follows, the group's other keys
            (``'param_names'``, a scheduler's ``'initial_lr'``) and ``'params'`` last.

        Raises nothing for a live optimizer.
        """
        state, hparams, options = _call("_optimizer_state", self._handle)
        groups = []
        for g, indices in enumerate(self._indices):
            packed = _torch_group(dict(hparams[g]), dict(options[g]))
            shown = {name: self._tensors[g].get(name, value) for name, value in hparams[g].items()}
            for key, value in _torch_group(shown, {}).items():
                if _holds_tensor(value):
                    packed[key] = value
            for key, value in self._extras[g].items():
                packed.setdefault(key, value)
            packed["params"] = list(indices)
            groups.append(packed)
        result = {"state": {int(i): dict(entry) for i, entry in state.items()}, "param_groups": groups}
        if self._name == "sparse_adam":  # torch.optim.SparseAdam keeps 'step' as a Python int
            for entry in result["state"].values():
                if "step" in entry:
                    entry["step"] = int(entry["step"].item())
        return result

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads a ``torch.optim``-format state dict (saved from this class, the eager
        ``functional_optim`` class or the ``torch.optim`` class), as ``functional_optim``'s
        ``load_state_dict`` does: parameters matched by position, state tensors copied and cast
        to each parameter's device and dtype (``'step'`` float32 on the parameter's device in a
        ``fused=True`` group), each group's saved hyperparameters and flags set (saved Tensors
        followed as copies), other saved keys kept in the group.

        Args:
            state_dict (Dict[str, Any]): ``{'state': {index: {key: Tensor}}, 'param_groups':
                [...]}``; each state tensor 0-dim or of its parameter's shape, any dtype and
                device (copied and cast).

        Raises:
            ValueError: a different number of groups or parameters (torch's messages), invalid
                values (torch's messages), a non-tensor state value, an index or shape that does
                not fit. Nothing changes then.
            RuntimeError: flags that would take a group off the fused kernels, or ``fused`` with
                ``foreach`` (torch's message).
        """
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self._indices):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g) != len(s["params"]) for g, s in zip(self._indices, saved_groups)):
            raise ValueError(
                "loaded state dict contains a parameter group that doesn't match the size of optimizer's group"
            )
        id_map = {}
        for saved, indices in zip(saved_groups, self._indices):
            id_map.update(zip(saved["params"], indices))
        new_state: Dict[int, Dict[str, Tensor]] = {
            id_map[saved_id]: state_entry_as_tensors(saved_id, entry)
            for saved_id, entry in state_dict["state"].items() if saved_id in id_map
        }
        current_h, current_o = self._values()
        updates_h, updates_o, bound = [], [], []
        for g, saved in enumerate(saved_groups):
            values = {k: v for k, v in saved.items() if k != "params"}
            rules = TensorRules(self._name, values.get("foreach", current_o[g].get("foreach")), False)
            h, o, _ = split_values(values, current_h[g].keys(), current_o[g].keys(), rules)
            self._check_values(g, dict(current_h[g], **h), dict(current_o[g], **o))
            updates_h.append({k: float(v) for k, v in h.items()})
            updates_o.append(o)
            bound.append(_functional_names({k: copy.deepcopy(v) for k, v in rules.tensors.items()}))
        _call("_optimizer_load_state", self._handle, new_state, updates_h, updates_o)
        for g, saved in enumerate(saved_groups):
            for name in updates_h[g]:
                self._tensors[g].pop(name, None)
            if bound[g]:
                _call("_optimizer_set_group", self._handle, g, {}, {}, bound[g])
                self._tensors[g].update(bound[g])
            known = _torch_group(current_h[g], current_o[g])
            for key, value in saved.items():
                if key != "params" and key not in known and (key not in self._extras[g] or key == "param_names"):
                    self._extras[g][key] = list(value) if key == "param_names" else value

    def hyperparameters(self) -> List[Dict[str, float]]:
        """Each group's numeric hyperparameters.

        Returns:
            List[Dict[str, float]]: one new dict per group, functional names (pairs split:
            ``beta1``, ``beta2``...), a Tensor hyperparameter's value read now.

        Raises nothing for a live optimizer.
        """
        return self._values()[0]

    def options(self) -> List[Dict[str, Optional[bool]]]:
        """Each group's flags.

        Returns:
            List[Dict[str, Optional[bool]]]: one new dict per group (``maximize``, ``foreach``,
            ``fused``, ...; ``foreach`` and ``fused`` may be None).

        Raises nothing for a live optimizer.
        """
        return self._values()[1]

    def set_group(self, group: int, hparams: Dict[str, Any], options: Dict[str, Optional[bool]],
                  tensor_hparams: Optional[Dict[str, Tensor]] = None) -> None:
        """Sets several values of one group at once, from the next step on, validated together
        first with the class's own checks (torch's messages); nothing changes when they fail.

        Args:
            group (int): the param group, from 0.
            hparams (Dict[str, float]): numbers by functional name (``lr``, ``beta1``...); a
                number replaces a Tensor the name followed.
            options (Dict[str, Optional[bool]]): flags by name; ``None`` only for ``foreach``
                and ``fused``.
            tensor_hparams (Dict[str, Tensor]): Tensors to follow, by functional name: one
                element each (shape ``[]`` or ``[1]``), any dtype and device, read with
                ``.item()`` before every step, as ``torch.optim`` reads a Tensor ``lr``.

        Raises:
            ValueError: no such group or name, an invalid value (torch's messages).
            RuntimeError: ``fused`` with ``foreach`` (torch's message), or flags that would take
                the group off the fused kernels (``foreach=True``, ``fused=False``...).
        """
        tensors = dict(tensor_hparams or {})
        n = len(self._indices)
        if not 0 <= group < n:
            raise ValueError(f"parameter group {group} does not exist (the optimizer has {n} groups)")
        current_h, current_o = self._values()
        for name in list(hparams) + list(tensors):
            if name not in current_h[group]:
                raise ValueError(f"unknown hyperparameter '{name}'; this optimizer has {list(current_h[group])}")
        for name, value in options.items():
            if name not in current_o[group]:
                raise ValueError(f"unknown option '{name}'; this optimizer has {list(current_o[group])}")
            if value is None and name not in ("foreach", "fused"):
                raise ValueError(f"option '{name}' must be True or False, not None")
        numbers = {k: float(v) for k, v in hparams.items()}
        read = {k: _validation.tensor_number(self._name, k, v, None, current_o[group].get("foreach"), False)
                for k, v in tensors.items()}
        self._check_values(group, dict(current_h[group], **numbers, **read), dict(current_o[group], **options))
        _call("_optimizer_set_group", self._handle, group, numbers, dict(options), tensors)
        for name in numbers:
            self._tensors[group].pop(name, None)
        self._tensors[group].update(tensors)

    def set_hyperparameter(self, group: int, name: str, value: float) -> None:
        """:meth:`set_group` of one number (``set_hyperparameter(0, "lr", 0.01)``).

        Args:
            group (int): the param group, from 0.
            name (str): a functional name (``lr``, ``beta1``, ...).
            value (float): the new value, in the units of the constructor's argument.

        Raises:
            ValueError: no such group or name, or an invalid value (torch's messages).
        """
        self.set_group(group, {name: value}, {})

    # --- helpers ----------------------------------------------------------------------------

    def _values(self) -> Tuple[List[Dict[str, float]], List[Dict[str, Optional[bool]]]]:
        hparams, options = _call("_optimizer_hyperparameters", self._handle)
        return [dict(h) for h in hparams], [dict(o) for o in options]

    def _check_values(self, group: int, hparams: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
        """A group's values as the class's ``set_group`` checks them, and the native guard."""
        self._class._check(None, hparams, options)
        _validation.check_options(options)
        if not _steps_fused(options):
            raise RuntimeError(
                f"parameter group {group} would no longer step through a fused kernel with foreach="
                f"{options.get('foreach')} and fused={options.get('fused')}; a native local optimizer steps only "
                f"fused groups"
            )

    def __repr__(self) -> str:
        return f"LocalOptimizer({self._class.__name__}, handle={self._handle})"


def _stand_in(t: Any, real: Dict[int, Tensor], made: Dict[int, Tensor]) -> Any:
    """An empty tensor with ``t``'s dtype, device and ``requires_grad`` (the same one for the
    same ``t``), recorded in ``real``; anything else as it is."""
    if not isinstance(t, Tensor) or t.layout != torch.strided:
        if isinstance(t, Tensor):
            real[id(t)] = t
        return t
    if id(t) not in made:
        made[id(t)] = torch.empty(0, dtype=t.dtype, device=t.device, requires_grad=t.requires_grad)
        real[id(made[id(t)])] = t
    return made[id(t)]


def _inspect(functional_class: type, params: Any, args: tuple, kwargs: dict) -> Tuple[Any, Dict[int, Tensor]]:
    """The eager instance that decides and describes the configuration, built over empty
    stand-ins of the parameters, and ``{id(stand-in): parameter}``.

    The eager instance is only read (groups, hyperparameters, flags, which kernels), and the
    C++ object makes its own state; built over the parameters themselves, Adagrad's eager
    instance would create a second copy of every parameter at construction (as torch's does),
    freed at once but kept by the allocator of the RPC thread that built it: a server with a
    local optimizer per trainer then held several unused copies of its tables. Where the
    constructor rejects the stand-ins, it runs again over the parameters, so that its own
    error (torch's message) is what the caller sees.
    """
    real: Dict[int, Tensor] = {}
    made: Dict[int, Tensor] = {}
    params = list(params) if not isinstance(params, (list, tuple, Tensor, dict)) else params

    def swap(entry: Any) -> Any:
        if isinstance(entry, dict):
            group = dict(entry)
            if "params" in group:
                group["params"] = swap(group["params"])
            return group
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str):  # (name, tensor)
            return (entry[0], _stand_in(entry[1], real, made))
        if isinstance(entry, (list, tuple)):
            return type(entry)(swap(e) if isinstance(e, (dict, tuple)) else _stand_in(e, real, made) for e in entry)
        return _stand_in(entry, real, made)

    try:
        return functional_class(swap(params), *args, **kwargs), real
    except Exception:  # noqa: BLE001 (raised again below, or not at all)
        eager = functional_class(params, *args, **kwargs)
        return eager, {id(p): p for group in eager._s.cache_params for p in group}


def _given_flags(functional_class: type, params: Any, args: tuple, kwargs: dict) -> Dict[str, Any]:
    """The flags ``differentiable`` and ``capturable`` as given (arguments, or any param group)."""
    flags: Dict[str, Any] = {}
    try:
        bound = inspect.signature(functional_class.__init__).bind(None, params, *args, **kwargs)
    except TypeError:
        return flags
    for name in ("differentiable", "capturable"):
        if bound.arguments.get(name):
            flags[name] = True
    if isinstance(params, (list, tuple)):
        for group in params:
            if isinstance(group, dict):
                for name in ("differentiable", "capturable"):
                    if group.get(name):
                        flags[name] = True
    return flags


def _reason(eager: Any, functional_class: type, real: Dict[int, Tensor]) -> Optional[str]:
    """Why the eager instance's groups do not all step through a fused kernel (None if they do);
    ``real`` maps its (stand-in) parameters to the parameters."""
    s = eager._s
    many = s.num_groups() > 1
    for g in range(s.num_groups()):
        if s.impl[g] == "fused" and s.name == "sparse_adam":
            for p in s.cache_params[g]:
                if not real[id(p)].is_contiguous():  # the sparse kernel addresses rows of contiguous parameters
                    reason = "a non-contiguous parameter (the fused sparse kernel needs contiguous ones)"
                    return f"{reason} (param group {g})" if many else reason
        if s.impl[g] == "fused":
            continue
        o = s.options[g]
        if o.get("foreach") is True:
            reason = "foreach=True"
        elif o.get("fused") is False:
            reason = "fused=False"
        elif o.get("foreach") is False:
            reason = "foreach=False"
        else:
            devices = _kernels.fused_devices(s.name)
            reason = "functional_optim's fused kernels are not available"
            for p in s.cache_params[g]:
                if p.device.type not in devices:
                    reason = f"no fused kernel for {functional_class.__name__} on {p.device.type}"
                    break
                if not _kernels.fused_dtype(p.dtype):
                    reason = f"no fused kernel for parameters of dtype {p.dtype}"
                    break
            else:
                error = _kernels.default_error()
                if error:
                    reason += f" ({error})"
        return f"{reason} (param group {g})" if many else reason
    return None
