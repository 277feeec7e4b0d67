"""The parameter/state container that every optimizer holds (a TorchScript class).

TorchScript classes cannot inherit from each other, so the optimizers share their bookkeeping by
composition: each optimizer owns one :class:`GroupedState` and forwards the state-protocol
methods (see :mod:`functional_optim.state_protocol`) to it after its own validation.

Layout (all TorchScript-typed):

* ``params``: every parameter, flat, group after group. The flat position is the parameter's
  index in ``torch.optim``'s ``state_dict`` format.
* ``offsets``: group ``g`` holds flat indices ``offsets[g] <= i < offsets[g + 1]``.
* ``hparams[g]``: ``Dict[str, float]`` of group ``g``'s numeric hyperparameters, named as in the
  functional form (``lr``, ``beta1``, ``beta2``, ``etaminus``, ...).
* ``options[g]``: ``Dict[str, Optional[bool]]`` of group ``g``'s flags (``maximize``, ``amsgrad``,
  ``foreach``, ``fused``, ...).
* ``state[i]``: ``Dict[str, Tensor]`` per parameter, keys and tensors exactly as ``torch.optim``
  keeps them (empty until the parameter's first step, like torch's lazy initialisation).
* Per-group caches of the parameter and state tensor lists, so that a step over a whole group
  (the common case) does not rebuild them: ``cache_state[g]`` is valid while ``cache_valid[g]``.
* ``packed[g]``, ``layout[g]``: a packed group's state (:meth:`GroupedState.pack`): its
  tensors are views of the buffers ``packed[g]`` (one per dtype), where the int64 tensor
  ``layout[g]`` says, so that its steps hand the op library a few buffers instead of every
  state tensor; empty for a group that is not packed.
* ``full_indices[g]`` (group ``g``'s flat indices): made once, handed out on every whole-group
  step instead of a new list; never modified.
* ``impl[g]`` (``"single"``, ``"foreach"`` or ``"fused"``) and ``sparse_errors[g]`` (the
  ``RuntimeError`` message for a sparse gradient in group ``g``, ``None`` when the group takes
  them): derived from the group's values whenever they are committed.
* ``tensor_hparams[g]``: the hyperparameters of group ``g`` given as Tensors (functional name ->
  the user's 1-element Tensor, the same object), as ``torch.optim`` takes ``lr`` and ``betas``.
  :meth:`GroupedState.sync_tensor_hparams` copies their current values into ``hparams[g]``
  before every step, so an in-place change (``lr.fill_(0.01)``, as the LR schedulers make) is
  used from the next step on, eagerly and in TorchScript. Setting a number for such a name
  unbinds its Tensor.
"""
import math
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import torch
from torch import Tensor

from . import _kernels, _validation, ops

__all__ = [
    "GroupedState", "TUPLE_HYPERPARAMETERS", "INT_HYPERPARAMETERS", "OPTIONAL_HYPERPARAMETERS",
    "CHOICE_HYPERPARAMETERS", "tuple_parts", "torch_value", "holds_tensor", "copy_tensors", "choose_impl", "split_by_device_dtype",
    "flag", "take", "scalar_list", "empty_names", "empty_tensors", "foreach_gradients", "fused_step", "no_fresh",
]

# torch.optim keeps these hyperparameters as tuples; the typed dicts keep their parts. A key is a
# tuple only for an optimizer that has its parts (:func:`tuple_parts`): Adafactor's ``eps`` is
# ``(eps1, eps2)``, the others' ``eps`` a float.
TUPLE_HYPERPARAMETERS = {
    "betas": ("beta1", "beta2"),
    "etas": ("etaminus", "etaplus"),
    "step_sizes": ("step_size_min", "step_size_max"),
    "ns_coefficients": ("ns_a", "ns_b", "ns_c"),
    "eps": ("eps1", "eps2"),
}
# The typed dicts (and the ops) hold every hyperparameter as a float; torch.optim keeps these
# otherwise (:func:`torch_value` converts back): an int (Muon's ns_steps); None or a float >= 0
# (Adafactor's eps1; None held as -inf, which compares equal to itself, unlike NaN); None or one of
# some strings (Muon's adjust_lr_fn; None held as 0, the k-th string as k + 1), with the start of
# the ValueError message for another string (torch's). The strings are the op library's table
# (each group step lists its own, csrc/steps/<name>.cpp: the op hyperparameter_choices), read
# here once (none when the library is missing: then no optimizer can be built).
INT_HYPERPARAMETERS = ("ns_steps",)
OPTIONAL_HYPERPARAMETERS = ("eps1",)
_CHOICE_MESSAGES = {"adjust_lr_fn": "Adjust learning rate function"}
CHOICE_HYPERPARAMETERS = {
    name: (tuple(strings), _CHOICE_MESSAGES.get(name, name))
    for name, strings in (ops.hyperparameter_choices().items() if _kernels.available() else ())
}


def tuple_parts(key: str, names: Iterable[str]) -> Optional[Tuple[str, ...]]:
    """Eager only: the parts of torch's tuple hyperparameter ``key`` for an optimizer whose
    typed hyperparameters are ``names``.

    Args:
        key (str): a ``torch.optim`` hyperparameter name (``"betas"``, ``"eps"``, ...).
        names (Iterable[str]): the optimizer's typed hyperparameter names.

    Returns:
        Optional[Tuple[str, ...]]: the typed names of the tuple's parts, in order (``betas``:
        ``("beta1", "beta2")``), or None where ``key`` is not a tuple for this optimizer.

    Raises nothing.
    """
    parts = TUPLE_HYPERPARAMETERS.get(key)
    if parts is not None and parts[0] in names:
        return parts
    return None


def torch_value(name: str, value: Any) -> Any:
    """Eager only: typed hyperparameter ``name`` as ``torch.optim`` keeps it.

    Args:
        name (str): the typed hyperparameter's name (``"ns_steps"``, ``"eps1"``, ...).
        value (Any): its typed value (a float), or a Tensor.

    Returns:
        Any: an int (:data:`INT_HYPERPARAMETERS`), None (an optional one held as ``-inf``), a
        string (one of :data:`CHOICE_HYPERPARAMETERS`), or ``value`` unchanged (a Tensor
        among them).

    Raises nothing.
    """
    if isinstance(value, Tensor):
        return value
    if name in INT_HYPERPARAMETERS:
        return int(value)
    if name in OPTIONAL_HYPERPARAMETERS and value == -math.inf:
        return None
    if name in CHOICE_HYPERPARAMETERS:
        return None if value == 0 else CHOICE_HYPERPARAMETERS[name][0][int(value) - 1]
    return value



def holds_tensor(value: Any) -> bool:
    """Eager only: whether a param group's value is, or holds, a Tensor: a Tensor, or a tuple or
    list with one among its items (a Tensor hyperparameter as torch keeps it, ``betas``' parts).
    The one test of it for this package and the plugin (``configuration.holds_tensor``).

    Args:
        value (Any): a param group's value (a number, a bool, a str, None, a Tensor, a tuple or
            list of them).

    Returns:
        bool: True for a Tensor, or a tuple or list with a Tensor among its items.

    Raises nothing.
    """
    return isinstance(value, Tensor) or (isinstance(value, (tuple, list)) and any(isinstance(v, Tensor) for v in value))


def copy_tensors(value: Any) -> Any:
    """Eager only: a param group's value with every Tensor in it replaced by a detached copy.

    Args:
        value (Any): a param group's value (as :func:`holds_tensor` takes it).

    Returns:
        Any: ``value.detach().clone()`` for a Tensor (same shape, dtype, device and values, no
        autograd history); for a tuple or list, one of the same type with its items copied so;
        any other value unchanged.

    Raises nothing.
    """
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(copy_tensors(v) for v in value)
    return value


def choose_impl(params: List[Tensor], foreach: Optional[bool], fused: Optional[bool]) -> str:
    """Pick the implementation the way ``torch.optim`` does for a group's parameters.

    Explicit flags win (``fused`` before ``foreach``). With neither set, torch defaults to the
    multi-tensor path only when every parameter is on a device with foreach kernels (CUDA, XPU,
    MTIA); on CPU that means the single-tensor path. (torch additionally falls back to the
    single-tensor path under TorchScript; ours has no such restriction.)
    """
    if fused is not None and fused:
        return "fused"
    if foreach is not None:
        return "foreach" if foreach else "single"
    if fused is not None:
        return "single"
    for p in params:
        device_type = p.device.type
        if not (device_type == "cuda" or device_type == "xpu" or device_type == "mtia"):
            return "single"
    return "foreach"


def split_by_device_dtype(tensors: List[Tensor]) -> List[List[int]]:
    """Positions of ``tensors`` grouped by (device, dtype), in first-seen order.

    The fused kernels need one device and dtype per call.
    """
    keys: List[Tuple[torch.device, torch.dtype]] = []
    out: List[List[int]] = []
    for i in range(len(tensors)):
        t = tensors[i]
        found = -1
        for k in range(len(keys)):
            if keys[k][0] == t.device and keys[k][1] == t.dtype:
                found = k
                break
        if found < 0:
            keys.append((t.device, t.dtype))
            out.append([i])
        else:
            out[found].append(i)
    return out


def _check_names(kind: str, names: List[str], known: List[str]) -> None:
    """Raise ``ValueError("unknown <kind> '<name>'; this optimizer has [...]")`` for the first of
    ``names`` not in ``known``."""
    for name in names:
        if name not in known:
            raise ValueError("unknown " + kind + " '" + name + "'; this optimizer has " + str(known))


def _no_state() -> Dict[str, Tensor]:
    return {}


def _no_lists() -> Dict[str, List[Tensor]]:
    empty: Dict[str, List[Tensor]] = {}
    return empty


def _no_keys() -> List[str]:
    empty: List[str] = []
    return empty


def _no_values() -> List[float]:
    empty: List[float] = []
    return empty


def _no_tensors() -> List[Tensor]:
    empty: List[Tensor] = []
    return empty


def _no_layout() -> Tensor:
    return torch.empty(0, dtype=torch.int64, device=torch.device("cpu"))


class GroupedState:
    """Parameters in groups, their hyperparameters and options, and their per-parameter state.

    Args:
        groups: the parameters of each group (``List[List[Tensor]]``), any devices and floating
            dtypes; each tensor at most once in all groups.
        hparams: one ``Dict[str, float]`` per group.
        options: one ``Dict[str, Optional[bool]]`` per group.

    Raises:
        ValueError: an empty parameter list, a non-leaf, sparse or complex parameter, or a
            parameter that appears twice.
    """

    def __init__(
        self,
        groups: List[List[Tensor]],
        hparams: List[Dict[str, float]],
        options: List[Dict[str, Optional[bool]]],
        name: str,
    ) -> None:
        self.name = name
        # torch.optim.SparseAdam's message for a dense gradient (the others take dense ones)
        self.dense_error: Optional[str] = (
            "SparseAdam does not support dense gradients, please consider Adam instead" if name == "sparse_adam" else None
        )
        self.params: List[Tensor] = []
        self.offsets: List[int] = [0]
        self.group_of: List[int] = []
        self.index: Dict[Tensor, int] = {}
        self.hparams: List[Dict[str, float]] = []
        self.options: List[Dict[str, Optional[bool]]] = []
        self.state: List[Dict[str, Tensor]] = []
        self.impl: List[str] = []
        self.sparse_impl: List[str] = []
        self.sparse_errors: List[Optional[str]] = []
        self.cache_valid: List[bool] = []
        self.cache_params: List[List[Tensor]] = []
        self.cache_state: List[Dict[str, List[Tensor]]] = []
        # Made once, read on every step, never modified: each group's flat indices.
        self.full_indices: List[List[int]] = []
        # The op library's view (group_step): each group's values as the ops take them, each
        # parameter's state keys (the op library's state_keys, set when a group's values are
        # committed, for every implementation), and a whole group's state as one list, cached
        # with cache_state (the default, fused, implementation's).
        self.op_names: List[List[str]] = []
        self.op_values: List[List[float]] = []
        self.keys: List[List[str]] = []
        self.cache_flat: List[List[Tensor]] = []
        self.tensor_hparams: List[Dict[str, Tensor]] = []
        self.any_tensor_hparams = False
        self.packed: List[List[Tensor]] = []
        self.layout: List[Tensor] = []
        # Values that the state is made from as the constructor gave them, whatever a group says
        # (the optimizer's constructor sets them before its groups' values are committed;
        # :meth:`set_op_values` puts them into the op values): torch's Adagrad starts every
        # 'sum' from its defaults' initial_accumulator_value.
        self.constructor_values: Dict[str, float] = {}
        for g in range(len(groups)):
            self.add_group(groups[g], hparams[g], options[g])
        error = ops.param_count_error(len(self.params))  # (raised here: in TorchScript as well, a ValueError)
        if error != "":
            raise ValueError(error)

    def add_group(self, group: List[Tensor], hparams: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
        """Append a parameter group (its values not yet validated: the optimizer's ``set_group``
        does that next, and :meth:`pop_group` takes the group back if it raises).

        Raises:
            ValueError: a non-leaf, sparse or complex parameter, or one already in a group
                (torch's message); nothing is changed then.
        """
        if self.name == "sparse_adam":
            _validation.check_sparse_adam_params(len(self.offsets) - 1, group)
        if self.name == "muon":
            _validation.check_muon_params(group)
        _validation.check_params(group)
        seen: Dict[Tensor, int] = {}
        for p in group:
            if p in self.index or p in seen:
                raise ValueError("some parameters appear in more than one parameter group")
            seen[p] = 0
        g = len(self.offsets) - 1
        for p in group:
            self.index[p] = len(self.params)
            self.params.append(p)
            self.group_of.append(g)
            self.state.append(_no_state())
            self.keys.append(_no_keys())
        self.offsets.append(len(self.params))
        self.hparams.append(hparams)
        self.options.append(options)
        self.impl.append("single")
        self.sparse_impl.append("single")
        self.sparse_errors.append(None)
        self.cache_valid.append(False)
        self.cache_params.append(group)
        self.cache_state.append(_no_lists())
        self.full_indices.append(list(range(self.offsets[g], self.offsets[g + 1])))
        self.op_names.append(_no_keys())
        self.op_values.append(_no_values())
        self.cache_flat.append(_no_tensors())
        self.tensor_hparams.append(_no_state())
        self.packed.append(_no_tensors())
        self.layout.append(_no_layout())

    def pop_group(self) -> None:
        """Remove the last group, added by :meth:`add_group` (before it ever stepped)."""
        g = len(self.offsets) - 2
        for i in range(self.offsets[g], self.offsets[g + 1]):
            del self.index[self.params[i]]
        for i in range(self.offsets[g], self.offsets[g + 1]):
            self.params.pop()
            self.group_of.pop()
            self.state.pop()
            self.keys.pop()
        self.offsets.pop()
        self.hparams.pop()
        self.options.pop()
        self.impl.pop()
        self.sparse_impl.pop()
        self.sparse_errors.pop()
        self.cache_valid.pop()
        self.cache_params.pop()
        self.cache_state.pop()
        self.full_indices.pop()
        self.op_names.pop()
        self.op_values.pop()
        self.cache_flat.pop()
        self.tensor_hparams.pop()
        self.packed.pop()
        self.layout.pop()
        self.unbind_tensors(0, [])  # recounts any_tensor_hparams

    # ----------------------------------------------------------------- structure
    def num_groups(self) -> int:
        return len(self.offsets) - 1

    def group_indices(self) -> List[List[int]]:
        """Flat parameter indices of each group."""
        out: List[List[int]] = []
        for g in range(self.num_groups()):
            out.append(list(range(self.offsets[g], self.offsets[g + 1])))
        return out

    def group_size(self, g: int) -> int:
        return self.offsets[g + 1] - self.offsets[g]

    def check_group(self, group: int) -> None:
        _validation.check_group_index(group, self.num_groups())

    def find(self, param: Tensor) -> int:
        """Flat index of ``param`` (the same tensor object); ValueError if it is not ours."""
        if param not in self.index:
            raise ValueError(
                "step_param: the tensor (" + _validation.describe(param)
                + ") is not a parameter of this optimizer"
            )
        return self.index[param]

    def check_gradients(
        self, gradients: List[Optional[Tensor]]
    ) -> Tuple[List[List[int]], List[List[Tensor]], List[bool]]:
        """:func:`functional_optim._validation.check_gradients` for these parameters and their
        groups' ``sparse_errors``.

        A group whose gradients are all present gets ``full_indices[g]`` itself (not a copy) as
        its indices: read it, never modify it.
        """
        return _validation.check_gradients(
            self.params, gradients, self.offsets, self.sparse_errors, self.cache_params, self.full_indices,
            self.dense_error,
        )

    def check_gradient(self, i: int, grad: Tensor) -> None:
        """:func:`functional_optim._validation.check_one_gradient` for flat parameter ``i``."""
        _validation.check_one_gradient(i, self.params[i], grad, self.sparse_errors[self.group_of[i]], self.dense_error)

    def params_at(self, indices: List[int]) -> List[Tensor]:
        out: List[Tensor] = []
        for i in indices:
            out.append(self.params[i])
        return out

    def params_of(self, g: int, indices: List[int]) -> List[Tensor]:
        """The parameters ``indices`` (all in group ``g``): the cached group list itself (read
        only) for a whole-group request, else a new list."""
        if self.is_full(g, indices):
            return self.cache_params[g]
        return self.params_at(indices)

    # ----------------------------------------------------------------- state lists
    def is_full(self, g: int, indices: List[int]) -> bool:
        return len(indices) == self.group_size(g)

    def needs_init(self, g: int, indices: List[int]) -> bool:
        """False when ``indices`` is the whole group and its state lists are cached."""
        return not (self.cache_valid[g] and self.is_full(g, indices))

    def prepare_state(self, g: int, indices: List[int], grads: List[Tensor]) -> Dict[str, List[Tensor]]:
        """The state lists of the parameters ``indices`` (all in group ``g``, each with its
        gradient in ``grads``) under their keys, and the parameters under ``'param'``, after
        making the state they lack (:meth:`make_state`: the keys and the initial values are the
        op library's, ``csrc/steps/<name>.cpp``, the one table of them). For the optimizers
        whose state keys do not depend on a parameter's number of dimensions (the group's first
        parameter's keys name the lists; Adafactor's do depend on it: it calls
        :meth:`make_state` and reads each parameter's state). Costs nothing for a whole-group
        step whose state lists are cached."""
        if self.needs_init(g, indices):
            self.make_state(g, indices, grads)
        lists = self.state_lists(g, indices, self.keys[indices[0]])
        lists["param"] = self.params_of(g, indices)
        return lists

    def flag(self, g: int, name: str) -> bool:
        """Group ``g``'s flag ``name`` as a plain bool (None counts as False)."""
        return flag(self.options[g], name)

    def state_lists(self, g: int, indices: List[int], keys: List[str]) -> Dict[str, List[Tensor]]:
        """The state tensors of ``indices`` (all in group ``g``) as one list per key.

        Call after the optimizer has created every key in ``keys`` for those parameters.
        A whole-group request is cached until the state or the group's options change.
        """
        full = self.is_full(g, indices)
        if full and self.cache_valid[g]:
            return self.cache_state[g]
        lists: Dict[str, List[Tensor]] = {}
        for key in keys:
            values: List[Tensor] = []
            for i in indices:
                values.append(self.state[i][key])
            lists[key] = values
        if full:
            self.cache_state[g] = lists
            self.cache_valid[g] = True
        return lists

    def invalidate(self, g: int) -> None:
        self.cache_valid[g] = False
        self.cache_state[g] = _no_lists()
        self.cache_flat[g] = _no_tensors()

    # ----------------------------------------------------------------- the default implementation
    def group_step(self, g: int, indices: List[int], grads: List[Tensor]) -> None:
        """One step of the parameters ``indices`` (all in group ``g``) with the group's default
        (fused) implementation: the op library's group step of this optimizer
        (``torch.ops.gilfree_optim.group_step``, ``csrc/group_step.h``), after ``new_state``
        made the state these parameters lack (as torch, at a parameter's first step; keys it
        already has are kept). What the plugin's native local optimizers run too. A whole-group
        step of a packed group (:meth:`pack`) passes its buffers instead of its state tensors
        (``torch.ops.gilfree_optim.group_step_packed``: the same group step)."""
        names = self.op_names[g]
        values = self.op_values[g]
        tensor_names: List[str] = []
        tensor_values: List[Tensor] = []
        for name, value in self.tensor_hparams[g].items():
            tensor_names.append(name)
            tensor_values.append(value)
        full = self.is_full(g, indices)
        packed = full and len(self.packed[g]) > 0
        cached = full and self.cache_valid[g] and len(self.cache_flat[g]) > 0
        if packed or cached:
            fresh = no_fresh(len(indices))
        else:
            fresh = self.make_state(g, indices, grads)
            made_together = full
            for made in fresh:
                made_together = made_together and made
            if made_together:  # the whole group's state, made at this step: packed from the start
                packed = self.pack(g)
        if packed:
            ops.group_step_packed(
                self.name, self.cache_params[g], grads, self.packed[g], self.layout[g], fresh, names, values,
                tensor_names, tensor_values,
            )
            return
        state = self.cache_flat[g]
        if not cached:
            state = _no_tensors()
            for i in indices:
                for key in self.keys[i]:
                    state.append(self.state[i][key])
            if full:
                self.cache_flat[g] = state
                self.cache_valid[g] = True
        ops.group_step(
            self.name, self.params_of(g, indices), grads, state, fresh, names, values, tensor_names, tensor_values
        )

    def pack(self, g: int) -> bool:
        """Make group ``g``'s state tensors views of one new buffer per dtype (their values
        copied), so that its whole-group steps pass the op library those buffers and
        ``layout[g]`` (``gilfree_optim::group_step_packed``) instead of every state tensor. Done
        only where nothing holds the tensors it replaces: right after the whole group's state
        was made at its first step, or loaded (:meth:`set_state`); the views are the state from
        then on (the same tensors at every step, as ``torch.optim`` keeps them). The copies are
        made a tensor at a time, each tensor replaced freed once copied (the buffers' pages are
        touched as they are filled). A state tensor whose storage is swapped in place afterwards
        (``set_``, ``.data =``, ``torch.utils.swap_tensors``) is not followed: load a state dict
        instead. Returns whether the group is packed: not when a parameter lacks a key, or a
        state tensor is not a contiguous tensor on the CPU."""
        state = _no_tensors()
        for i in range(self.offsets[g], self.offsets[g + 1]):
            for key in self.keys[i]:
                if key not in self.state[i]:
                    return False
                state.append(self.state[i][key])
        firsts = _no_tensors()  # the first state tensor of each dtype
        sizes: List[int] = []
        where: List[int] = []
        for t in state:
            if t.device.type != "cpu" or t.is_sparse or not t.is_contiguous():
                return False
            d = len(firsts)
            for k in range(len(firsts)):
                if firsts[k].dtype == t.dtype:
                    d = k
            if d == len(firsts):
                firsts.append(t)
                sizes.append(0)
            where.append(d)
            sizes[d] += t.numel()
        if len(state) == 0:
            return False
        self.invalidate(g)  # (drops the cached lists of the tensors replaced below)
        buffers = _no_tensors()
        for d in range(len(firsts)):
            buffers.append(torch.empty(sizes[d], dtype=firsts[d].dtype, device=firsts[d].device))
            sizes[d] = 0
        firsts = _no_tensors()
        layout: List[int] = []
        j = 0
        for i in range(self.offsets[g], self.offsets[g + 1]):
            for key in self.keys[i]:
                t = state[j]
                d = where[j]
                view = buffers[d].narrow(0, sizes[d], t.numel()).view(t.shape)
                view.copy_(t)
                self.state[i][key] = view
                state[j] = view  # the tensor copied is freed now, not after the whole group
                layout.extend([d, sizes[d], t.dim()])
                layout.extend(t.shape)
                sizes[d] += t.numel()
                j += 1
        self.packed[g] = buffers
        self.layout[g] = torch.tensor(layout, dtype=torch.int64, device=torch.device("cpu"))
        return True

    def unpack(self, g: int) -> None:
        """Group ``g``'s steps pass its state tensors one by one again (they stay views of its
        buffers: nothing is copied)."""
        self.packed[g] = _no_tensors()
        self.layout[g] = _no_layout()

    def make_state(self, g: int, indices: List[int], grads: List[Tensor]) -> List[bool]:
        """Makes the state keys that the parameters ``indices`` (all in group ``g``, each with
        its gradient in ``grads``) lack, as torch makes them at a parameter's first step (or, for
        Adagrad, at construction): the op library's ``new_state`` (``csrc/steps/<name>.cpp``:
        keys, shapes, dtypes, devices and initial values, the one table of them), with the
        group's op values (:meth:`state_values`). Keys a parameter already has are kept.
        Returns, per parameter, whether all of its state is new (SGD's momentum buffers: then
        written by the step, as torch's first step makes them from the gradient)."""
        fresh: List[bool] = []
        lacking: List[int] = []
        lacking_params: List[Tensor] = []
        lacking_grads: List[Tensor] = []
        for k in range(len(indices)):
            i = indices[k]
            have = 0
            for key in self.keys[i]:
                if key in self.state[i]:
                    have += 1
            fresh.append(have == 0 and len(self.keys[i]) > 0)
            if have < len(self.keys[i]):
                lacking.append(i)
                lacking_params.append(self.params[i])
                lacking_grads.append(grads[k])
        if len(lacking) > 0:
            names, values = self.state_values(g)
            made = ops.new_state(self.name, lacking_params, lacking_grads, names, values)
            at = 0
            for i in lacking:
                for key in self.keys[i]:
                    if key not in self.state[i]:
                        self.state[i][key] = made[at]
                    at += 1
        return fresh

    def state_values(self, g: int) -> Tuple[List[str], List[float]]:
        """Group ``g``'s values as ``new_state`` takes them: its op values, with ``fused`` set to
        0 (False) where the group runs torch's single-tensor or foreach implementation, so that
        the op makes the state as torch makes it for such a group (its ``'step'`` on the CPU, of
        torch's scalar dtype; ``csrc/group_step.h``: newStep)."""
        if self.impl[g] == "fused":
            return self.op_names[g], self.op_values[g]
        names: List[str] = []
        values: List[float] = []
        for k in range(len(self.op_names[g])):
            if self.op_names[g][k] != "fused":
                names.append(self.op_names[g][k])
                values.append(self.op_values[g][k])
        names.append("fused")
        values.append(0.0)
        return names, values

    def set_op_values(self, g: int) -> None:
        """Group ``g``'s values as the ops take them (``op_names``, ``op_values``: the
        hyperparameters, those of :attr:`constructor_values` with the constructor's value, then
        each flag that is set, as 1.0 or 0.0)."""
        names: List[str] = []
        values: List[float] = []
        for name, value in self.hparams[g].items():
            names.append(name)
            values.append(self.constructor_values[name] if name in self.constructor_values else value)
        for name, flag_value in self.options[g].items():
            if flag_value is not None:
                names.append(name)
                values.append(1.0 if flag_value else 0.0)
        self.op_names[g] = names
        self.op_values[g] = values

    def set_keys(self, g: int) -> None:
        """The state keys of group ``g``'s parameters with its current values (the op
        library's ``state_keys``, asked once per number of dimensions)."""
        if not torch.jit.is_scripting():
            _kernels.eager_load()  # ImportError naming the library file when it is missing
        by_dim: Dict[int, List[str]] = {}
        for i in range(self.offsets[g], self.offsets[g + 1]):
            dim = self.params[i].dim()
            if dim not in by_dim:
                by_dim[dim] = ops.state_keys(self.name, dim, self.op_names[g], self.op_values[g])
            self.keys[i] = by_dim[dim]

    # ----------------------------------------------------------------- state protocol
    def get_state(self) -> Dict[int, Dict[str, Tensor]]:
        """Per-parameter state keyed by flat index; new dicts holding the live tensors."""
        out: Dict[int, Dict[str, Tensor]] = {}
        for i in range(len(self.state)):
            if len(self.state[i]) > 0:
                entry: Dict[str, Tensor] = {}
                for key, value in self.state[i].items():
                    entry[key] = value
                out[i] = entry
        return out

    def set_state(self, state: Dict[int, Dict[str, Tensor]]) -> None:
        """Replace all per-parameter state with copies of ``state`` (torch's casting rules).

        ``"step"`` keeps its dtype and stays where it is, except in a group that runs the fused
        implementation (``fused=True``, or by default) where it becomes float32 on the
        parameter's device, as the fused kernels take it; every other tensor takes the
        parameter's device, and its dtype if the parameter is floating point. Parameters missing
        from ``state`` start afresh at their next step. Nothing changes if a check fails.

        Raises:
            ValueError: an index that is not a parameter, a tensor that is not dense, or one whose shape differs from
                the one the optimizer keeps for its parameter (the state the op library's
                ``new_state`` makes for it, on the meta device; a key it does not keep may also
                be 0-dim).
        """
        new_state: List[Dict[str, Tensor]] = []
        for i in range(len(self.params)):
            new_state.append(_no_state())
        for i, entry in state.items():
            if i < 0 or i >= len(self.params):
                raise ValueError(
                    "set_state: no parameter with index " + str(i) + " (the optimizer has "
                    + str(len(self.params)) + " parameters)"
                )
            param = self.params[i]
            g = self.group_of[i]
            fused = self.options[g].get("fused")
            meta = torch.empty_strided(param.shape, param.stride(), dtype=param.dtype, device="meta")
            made = ops.new_state(self.name, [meta], [meta], self.op_names[g], self.op_values[g])
            keys = ops.state_keys(self.name, param.dim(), self.op_names[g], self.op_values[g])
            copied: Dict[str, Tensor] = {}
            for key, value in entry.items():
                # a key the optimizer keeps has the shape it keeps it with (a 0-dim tensor for a
                # tensor state would let the steps read and write past it); another key (kept, not
                # read by the steps) 0-dim or of the parameter's shape
                expected = list(param.shape)
                known = key in keys
                if known:
                    expected = list(made[keys.index(key)].shape)
                if value.layout != torch.strided:
                    raise ValueError(
                        "set_state: state[" + str(i) + "]['" + key + "'] is a " + str(value.layout)
                        + " tensor; optimizer state tensors are dense (torch.strided)"
                    )
                if list(value.shape) != expected and (known or value.dim() != 0):
                    raise ValueError(
                        "set_state: state[" + str(i) + "]['" + key + "'] has shape "
                        + str(list(value.shape)) + " but this optimizer keeps it with shape " + str(expected)
                        + " for its parameter of shape " + str(list(param.shape))
                    )
                if key == "step":
                    # (the default implementation is the group step's too: off the CPU its fused
                    # kernels take the counter on the parameter's device)
                    if (fused is not None and fused) or self.impl[g] == "fused":
                        copied[key] = value.to(device=param.device, dtype=torch.float32, copy=True)
                    else:
                        copied[key] = value.clone()
                elif param.is_floating_point():
                    copied[key] = value.to(device=param.device, dtype=param.dtype, copy=True)
                else:
                    copied[key] = value.to(device=param.device, copy=True)
            new_state[i] = copied
        self.state = new_state
        for g in range(self.num_groups()):
            self.invalidate(g)
            self.unpack(g)
            if self.impl[g] == "fused":
                self.pack(g)

    # ----------------------------------------------------------------- Tensor hyperparameters
    def bind_tensor(self, group: int, name: str, value: Tensor) -> None:
        """Make hyperparameter ``name`` of group ``group`` follow ``value`` (a 1-element Tensor,
        validated by the caller): its value is read before every step (:meth:`sync_tensor_hparams`)."""
        self.check_group(group)
        _check_names("hyperparameter", [name], list(self.hparams[group].keys()))
        self.tensor_hparams[group][name] = value
        self.any_tensor_hparams = True
        self.hparams[group][name] = float(value.item())
        self.set_op_values(group)

    def unbind_tensors(self, group: int, names: List[str]) -> None:
        """Stop following the Tensors bound to ``names`` in group ``group`` (a number was set)."""
        bound = self.tensor_hparams[group]
        for name in names:
            if name in bound:
                del bound[name]
        any_bound = False
        for d in self.tensor_hparams:
            if len(d) > 0:
                any_bound = True
        self.any_tensor_hparams = any_bound

    def sync_tensor_hparams(self) -> None:
        """Copy the current value of every bound Tensor hyperparameter into ``hparams``
        (``float(t.item())``: a read without a device sync on the CPU). Not validated, as
        ``torch.optim`` does not validate a Tensor changed in place. Costs one test when no
        Tensor is bound."""
        if self.any_tensor_hparams:
            for g in range(len(self.tensor_hparams)):
                for name, value in self.tensor_hparams[g].items():
                    self.hparams[g][name] = float(value.item())
                if len(self.tensor_hparams[g]) > 0:
                    self.set_op_values(g)

    def check_tensor_foreach(self, group: int, options: Dict[str, Optional[bool]], names: List[str]) -> None:
        """torch's rule for the Tensors still bound in group ``group`` (except ``names``, being
        set to numbers) with ``options``: ``torch.optim.Adam`` and ``AdamW`` refuse a Tensor
        ``lr`` (``RuntimeError``) or beta (``ValueError``) with ``foreach=True`` (without
        ``capturable``, which functional_optim does not support), with torch's messages."""
        if (self.name == "adam" or self.name == "adamw") and flag(options, "foreach"):
            for name in ["lr", "beta1", "beta2"]:
                if name in self.tensor_hparams[group] and name not in names:
                    message = name + " as a Tensor is not supported for capturable=False and foreach=True"
                    if name == "lr":
                        raise RuntimeError(message)
                    raise ValueError(message)

    def hyperparameters(self) -> List[Dict[str, float]]:
        self.sync_tensor_hparams()
        out: List[Dict[str, float]] = []
        for h in self.hparams:
            out.append(h.copy())
        return out

    def get_options(self) -> List[Dict[str, Optional[bool]]]:
        out: List[Dict[str, Optional[bool]]] = []
        for o in self.options:
            out.append(o.copy())
        return out

    def updated_hparams(self, group: int, updates: Dict[str, float]) -> Dict[str, float]:
        """A copy of group ``group``'s hyperparameters with ``updates`` applied (unknown names raise)."""
        self.check_group(group)
        h = self.hparams[group].copy()
        _check_names("hyperparameter", list(updates.keys()), list(h.keys()))
        h.update(updates)
        return h

    def updated_options(self, group: int, updates: Dict[str, Optional[bool]]) -> Dict[str, Optional[bool]]:
        """A copy of group ``group``'s options with ``updates`` applied (unknown names raise;
        ``None`` only for ``foreach`` and ``fused``)."""
        self.check_group(group)
        o = self.options[group].copy()
        _check_names("option", list(updates.keys()), list(o.keys()))
        for name, value in updates.items():
            if value is None and name != "foreach" and name != "fused":
                raise ValueError("option '" + name + "' must be True or False, not None")
        o.update(updates)
        return o

    def flags_impl(self, group: int, options: Dict[str, Optional[bool]]) -> str:
        """The implementation torch's rule gives group ``group`` with ``options``
        (:func:`choose_impl`): what its steps with sparse gradients use."""
        return choose_impl(
            self.cache_params[group], _validation.option(options, "foreach"), _validation.option(options, "fused")
        )

    def choose_group_impl(self, group: int, options: Dict[str, Optional[bool]]) -> str:
        """The implementation group ``group`` would use with ``options``.

        Explicit flags win (:func:`choose_impl`). With ``foreach`` and ``fused`` both None, the
        fused implementation (the op library's group step of this optimizer) when every
        parameter is a dense floating-point tensor (float32, float64, bfloat16, float16) on a
        device it takes (:func:`~functional_optim._kernels.fused_devices`: none when the op
        library is not loaded), else torch's rule.

        Raises:
            ImportError: ``fused=True`` and the op library cannot be loaded (naming the file).
            RuntimeError: ``fused=True`` with a parameter that is not floating point or is on a
                device the fused implementation does not take (torch's message).
        """
        params = self.cache_params[group]
        if _validation.option(options, "foreach") is None and _validation.option(options, "fused") is None:
            devices = _kernels.fused_devices(self.name)
            usable = len(params) > 0
            for p in params:
                if not (_kernels.fused_dtype(p.dtype) and p.device.type in devices and not p.is_sparse):
                    usable = False
            if usable:
                return "fused"
        impl = self.flags_impl(group, options)
        if impl == "fused":
            if not torch.jit.is_scripting():
                _kernels.eager_load()  # ImportError naming the library file when it is missing
            _validation.check_fused_params(params, _kernels.fused_devices(self.name))
        return impl

    def commit(
        self, group: int, hparams: Dict[str, float], options: Dict[str, Optional[bool]], impl: str,
        sparse_impl: str, sparse_error: Optional[str],
    ) -> None:
        """Install a group's validated values and what follows from them (drops its cached lists)."""
        self.hparams[group] = hparams
        self.options[group] = options
        self.impl[group] = impl
        self.sparse_impl[group] = sparse_impl
        self.sparse_errors[group] = sparse_error
        self.invalidate(group)
        self.set_op_values(group)
        keys_before = self.keys[self.offsets[group]:self.offsets[group + 1]]
        self.set_keys(group)
        if impl == "fused":
            for k in range(len(keys_before)):
                if keys_before[k] != self.keys[self.offsets[group] + k]:  # a key more or less: not packed
                    self.unpack(group)
                    break
        else:
            self.unpack(group)
        if not torch.jit.is_scripting():
            self.refresh_param_group(group)

    # ----------------------------------------------------------------- eager only
    @torch.jit.unused
    def refresh_param_group(self, group: int) -> None:
        """Eager only: rewrite the torch-style ``param_groups[group]`` dict from the typed dicts."""
        param_groups = getattr(self, "param_groups", None)
        if param_groups is not None and group < len(param_groups):  # (a group being added has none yet)
            param_groups[group]._refresh()


def fused_step(
    name: str, params: List[Tensor], grads: List[Tensor], columns: List[List[Tensor]], fresh: List[bool],
    names: List[str], values: List[float],
) -> None:
    """The functional forms' fused path: the op library's group step of optimizer ``name``
    (``torch.ops.gilfree_optim.group_step``, ``csrc/steps/<name>.cpp``), the one that the
    classes' default implementation and the plugin's native local optimizers run.

    Args:
        columns: the state, one list per key in the optimizer's key order (``state_keys``),
            one tensor per parameter; every tensor present.
        fresh: per parameter, whether its state was just made (its first step); only SGD's
            momentum buffers read it.
        names, values: the hyperparameters and flags (a flag as 1.0 or 0.0) by name.
    """
    state: List[Tensor] = []
    for i in range(len(params)):
        for column in columns:
            state.append(column[i])
    ops.group_step(name, params, grads, state, fresh, names, values, empty_names(), empty_tensors())


def empty_names() -> List[str]:
    """``[]`` typed for TorchScript: a group step's ``tensor_names`` when no hyperparameter is a
    Tensor."""
    names: List[str] = []
    return names


def empty_tensors() -> List[Tensor]:
    """``[]`` typed for TorchScript: the matching ``tensor_values``."""
    tensors: List[Tensor] = []
    return tensors


def no_fresh(n: int) -> List[bool]:
    """``[False] * n`` (TorchScript)."""
    fresh: List[bool] = []
    for k in range(n):
        fresh.append(False)
    return fresh


def flag(options: Dict[str, Optional[bool]], name: str) -> bool:
    """``options[name]`` as a plain bool (None counts as False)."""
    value = options[name]
    return value is not None and value


def take(tensors: List[Tensor], positions: List[int]) -> List[Tensor]:
    """``[tensors[k] for k in positions]``, for sorted, distinct ``positions``.

    When ``positions`` selects everything, ``tensors`` itself is returned. Besides saving a
    copy this matters for correctness under TorchScript: its dead-code elimination drops an
    in-place list op (``torch._foreach_add_``, ``torch._fused_sgd_``, ...) whose list arguments
    are all fresh lists that are not used afterwards, even though their elements alias live
    tensors (observed on torch 2.13). Returning through this ``if`` makes the result alias the
    input list, so such ops are kept. Every list that this package hands to an in-place list
    op either is an input/attribute list or comes from here or from an ``if`` of the same kind.
    """
    if len(positions) == len(tensors):
        return tensors
    out: List[Tensor] = []
    for k in positions:
        out.append(tensors[k])
    return out


def foreach_gradients(params: List[Tensor], grads: List[Tensor], weight_decay: float, maximize: bool) -> List[Tensor]:
    """The gradients a multi-tensor step uses: negated when ``maximize``, plus ``weight_decay``
    times the parameter (L2) when it is not 0, as torch's ``_multi_tensor_*`` functions do.

    The caller's tensors are not changed: when either applies, the result is a new list of new
    tensors; otherwise it is ``grads`` itself.
    """
    if maximize:
        grads = torch._foreach_neg(grads)
    if weight_decay != 0:
        if maximize:
            torch._foreach_add_(grads, params, alpha=weight_decay)
        else:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
    return grads


def scalar_list(values: List[float]) -> List[Union[float, int, complex]]:
    """A ``List[float]`` typed as TorchScript's ``Scalar[]`` (what ``_foreach_*.ScalarList`` takes)."""
    out: List[Union[float, int, complex]] = []
    for v in values:
        out.append(v)
    return out


def adam_moments(
    i: int, params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor], beta1: float, beta2: float, lr: float, weight_decay: float,
    decoupled_weight_decay: bool, maximize: bool,
) -> Tuple[Tensor, float]:
    """The first half of a single-tensor step of parameter ``i`` that Adam, NAdam and RAdam share.

    Counts the step; negates the gradient when ``maximize``; applies weight decay (decoupled:
    scales the parameter by ``1 - lr * weight_decay``; L2: adds ``weight_decay * param`` to
    the gradient); moves ``exp_avg`` towards the gradient by ``1 - beta1`` and sets
    ``exp_avg_sq`` to ``beta2 * exp_avg_sq + (1 - beta2) * grad**2``, in place. Returns the
    gradient used (a new tensor when changed; the caller's is never written) and the new step.
    """
    param = params[i]
    state_steps[i].add_(1)
    grad = grads[i] if not maximize else -grads[i]
    if weight_decay != 0:
        if decoupled_weight_decay:
            param.mul_(1 - lr * weight_decay)
        else:
            grad = grad.add(param, alpha=weight_decay)
    exp_avgs[i].lerp_(grad, 1 - beta1)
    exp_avg_sqs[i].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    return grad, float(state_steps[i].item())


def foreach_adam_moments(
    params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor], beta1: float,
    beta2: float, lr: float, weight_decay: float, decoupled_weight_decay: bool, maximize: bool,
) -> List[Tensor]:
    """:func:`adam_moments` for lists (``torch._foreach_*``), ``maximize`` included; the
    caller's gradients are not changed. Returns the gradients used (see :func:`foreach_gradients`)."""
    if decoupled_weight_decay and weight_decay != 0:
        torch._foreach_mul_(params, 1 - lr * weight_decay)
    grads = foreach_gradients(params, grads, 0.0 if decoupled_weight_decay else weight_decay, maximize)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    return grads
