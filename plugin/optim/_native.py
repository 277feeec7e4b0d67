"""The native local optimizer: an owner's share of a :class:`~plugin.optim.DistributedOptimizer`,
stepped in C++ (``torch.classes.gilfree_rpc.NativeLocalOptimizer``, ``plugin/csrc/optim/local_optimizer.h``)
through ``functional_optim``'s group steps, without the GIL and without TorchScript.

:class:`NativeLocalOptimizer` keeps an optimizer of ``functional_optim`` (the class's own code keeps
the values, checks them, loads and saves state) and a C++ object that keeps what the steps
need: the parameters, each group's plan (``functional_optim.configuration.step_plans``) and the
state. After every change of values it hands the C++ object the new plans, and after a load
the state ``functional_optim`` checked and cast; the C++ object makes the state of a
parameter's first step itself (the op library's ``new_state``). Steps go to the C++ object's
ops by its handle (``plugin.ops``): the same ops another worker calls by RPC
(``plugin/csrc/rpc/rpc_functions.cpp``); everything else runs here, in Python. Nothing here
names a particular optimizer or calls ``torch.jit``.
"""
import inspect
import threading
from typing import Any, Dict, Iterable, List, Optional, Tuple

from torch import Tensor

import functional_optim
from functional_optim import configuration

from .. import ops

__all__ = ["NativeLocalOptimizer"]


def _given_flags(functional_class: type, params: Any, args: tuple, kwargs: dict) -> Optional[str]:
    """Why the class or its flags rule the native local optimizer out before it is built: a class
    the registry does not map from ``torch.optim``, or ``"differentiable=True"`` or
    ``"capturable=True"`` given (arguments, or a param group)."""
    if functional_optim.torch_optimizer_for(functional_class) is None:
        return "a functional class registered by the user"
    try:
        bound = inspect.signature(functional_class.__init__).bind(None, params, *args, **kwargs).arguments
    except TypeError:
        return None
    groups = [g for g in params if isinstance(g, dict)] if isinstance(params, (list, tuple)) else []
    for flag in ("differentiable", "capturable"):
        if bound.get(flag) or any(g.get(flag) for g in groups):
            return f"{flag}=True"
    return None


def _optimizer(functional_class: type, params: Any, args: tuple, kwargs: dict) -> Any:
    """``functional_class(params, *args, **kwargs)`` (an iterator of parameters read once)."""
    if not isinstance(params, (list, tuple, Tensor, dict)):
        params = list(params)
    return functional_class(params, *args, **kwargs)


class NativeLocalOptimizer:
    """One worker's share of a distributed optimizer, stepped natively (C++).

    Holds a C++ ``torch.classes.gilfree_rpc.NativeLocalOptimizer`` over ``params``, reached by its
    :attr:`handle` (unique in the process); it lives as long as this object. Every call that
    reads or writes the parameters, their state or the hyperparameters holds the parameters'
    locks (per parameter, shared with every local optimizer of this process, waited for without
    the GIL); the steps run without the GIL and without TorchScript, locally and when another
    worker calls the same ops by RPC.

    Results are bitwise those of the ``functional_optim`` eager instance built with the same
    arguments: a group's step is the op library's group step of the optimizer
    (``torch.ops.gilfree_optim.group_step``, ``functional_optim/csrc/steps/<name>.cpp``), the
    one that instance's default implementation runs, with the same state (keys, dtypes,
    devices, created at a parameter's first step), the same checks and messages. Algorithms:
    ``torch.optim``'s (the class of the same name). Sparse (COO) gradients are taken where the
    ``functional_optim`` class takes them.

    Args:
        functional_class (type): a ``functional_optim`` class with a fused implementation (the
            registry's: ``functional_optim.Adam``, ...).
        params: the parameters on this worker, as for ``torch.optim``: a list of leaf tensors
            (any shape; float32, float64, bfloat16 or float16; on a device the optimizer's fused
            implementation takes) or of param-group dicts.
        *args: the optimizer's positional hyperparameters, as for the class (numbers or
            1-element Tensors, which the steps follow).
        **kwargs: its keyword hyperparameters, likewise.

    Raises:
        ValueError: a configuration without the fused implementation everywhere
            (:meth:`why_not_native` says why), or what the class's constructor raises (invalid
            hyperparameters, empty ``params``: torch's messages).
        TypeError, RuntimeError: what the class's constructor raises.
    """

    def __init__(self, functional_class: type, params: Any, *args: Any, **kwargs: Any) -> None:
        reason = self._init(functional_class, params, args, kwargs)
        if reason is not None:
            raise ValueError(f"NativeLocalOptimizer: {functional_class.__name__} cannot step natively here: {reason}")

    @classmethod
    def build(cls, functional_class: type, params: Any, *args: Any, **kwargs: Any) -> Tuple[Optional["NativeLocalOptimizer"], Optional[str]]:
        """A local optimizer, or why there is none, building the ``functional_optim`` optimizer once.

        Args:
            functional_class (type), params, *args, **kwargs: as for the constructor.

        Returns:
            Tuple[Optional[NativeLocalOptimizer], Optional[str]]: the optimizer and ``None``, or
            ``None`` and :meth:`why_not_native`'s words.

        Raises:
            Exception: what the class's constructor raises (invalid hyperparameters...).
        """
        local = cls.__new__(cls)
        reason = local._init(functional_class, params, args, kwargs)
        return (local, None) if reason is None else (None, reason)

    def _init(self, functional_class: type, params: Any, args: tuple, kwargs: dict) -> Optional[str]:
        """Builds the ``functional_optim`` optimizer and the C++ object; or builds nothing and
        returns why not."""
        reason = _given_flags(functional_class, params, args, kwargs)
        optimizer = _optimizer(functional_class, params, args, kwargs)
        reason = reason or configuration.not_fused(optimizer)
        if reason is not None:
            return reason
        self._class = functional_class
        self._optim = optimizer
        self._name = configuration.optimizer_name(optimizer)
        self._lock = threading.Lock()  # the functional_optim optimizer's, between this process's threads
        groups = [list(group["params"]) for group in optimizer.param_groups]
        self._object = ops.new_local_optimizer(self._name, groups, configuration.dense_error(optimizer))
        self._handle: int = self._object.handle()
        self._configure(range(len(groups)), with_state=True)
        return None

    @staticmethod
    def why_not_native(functional_class: type, params: Any, *args: Any, **kwargs: Any) -> Optional[str]:
        """Why :class:`NativeLocalOptimizer` cannot step this configuration, in words; ``None`` when it can.

        It can when ``functional_class`` has a fused implementation and every param group runs
        it: ``functional_optim``'s default for dense floating-point parameters on a device the
        implementation takes (every optimizer on the CPU; SGD, Adam, AdamW and Adagrad on
        CUDA), or ``fused=True``. Arguments the constructor rejects give ``None``, so that the
        constructor raises its own error.

        Args:
            functional_class (type), params, *args, **kwargs: as for the constructor (``params``
                a list, not an iterator, when the caller uses it again).

        Returns:
            Optional[str]: ``None``, or a reason such as ``"foreach=True"``, ``"fused=False"``,
            ``"differentiable=True"``, ``"no fused implementation for RMSprop on cuda"``.

        Raises nothing.
        """
        reason = _given_flags(functional_class, params, args, kwargs)
        if reason is not None:
            return reason
        try:
            return configuration.not_fused(_optimizer(functional_class, params, args, kwargs))
        except Exception:  # noqa: BLE001 (the constructor raises it again, with its message)
            return None

    @property
    def handle(self) -> int:
        """The C++ object's handle in this process's registry (what the ops take first)."""
        return self._handle

    @property
    def name(self) -> str:
        """The optimizer's name in the op library (``"adam"``...)."""
        return self._name

    def accepts_sparse(self) -> bool:
        """Whether every param group takes sparse (COO) gradients.

        Returns:
            bool: True for SGD and Adagrad unless a group has ``fused=True`` (Adagrad: or
            ``weight_decay != 0``), and SparseAdam; False for the others.

        Raises nothing.
        """
        with self._lock:
            return all(plan.sparse_error is None for plan in configuration.step_plans(self._optim))

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
        ops._optimizer_step(self._handle, context_id, -1, -1)

    def step_gradients(self, gradients: List[Optional[Tensor]]) -> None:
        """Applies ``gradients`` under the same locks as :meth:`step`.

        Args:
            gradients (List[Optional[Tensor]]): one per parameter, flat order (group after
                group): a tensor of the parameter's shape, dtype and device (sparse COO where
                the optimizer takes it), or ``None`` to skip that parameter.

        Raises:
            ValueError: wrong number of gradients, or one whose shape, dtype or device differs
                from its parameter's (``functional_optim``'s messages). Nothing changes then.
            RuntimeError: a sparse gradient the group does not take (torch's message).
        """
        ops._optimizer_step_gradients(self._handle, gradients)

    # --- state and values: functional_optim's, in Python ------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The state in the matching ``torch.optim`` class's format.

        Returns:
            Dict[str, Any]: ``{'state': {flat index: {key: Tensor}}, 'param_groups': [...]}``:
            torch's keys, shapes, dtypes and devices, copies taken under the parameters' locks;
            the groups as the ``functional_optim`` class saves them (torch's names, a Tensor
            hyperparameter as the Tensor it follows, the group's other keys: ``'param_names'``,
            a scheduler's ``'initial_lr'``; ``'params'`` last).

        Raises nothing for a live optimizer.
        """
        with self._lock:
            groups = self._optim.state_dict()["param_groups"]  # (it keeps no state: the C++ object does)
            return configuration.torch_state_dict(self._name, self._object.state(), groups)

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads a ``torch.optim``-format state dict (saved from this class, the eager
        ``functional_optim`` class or the ``torch.optim`` class) with the ``functional_optim``
        class's ``load_state_dict``: parameters matched by position, state tensors copied and
        cast to each parameter's device and dtype, each group's saved hyperparameters and flags
        set (saved Tensors followed as copies), other saved keys kept in the group. The new
        values and state reach the steps at once, under the parameters' locks.

        Args:
            state_dict (Dict[str, Any]): ``{'state': {index: {key: Tensor}}, 'param_groups':
                [...]}``; each state tensor 0-dim or of its parameter's shape, any dtype and
                device (copied and cast).

        Raises:
            ValueError: a different number of groups or parameters (torch's messages), invalid
                values (torch's messages), a non-tensor state value, an index or shape that does
                not fit. Nothing changes then.
            RuntimeError: flags that would take a group off the fused implementation, or
                ``fused`` with ``foreach`` (torch's message).
        """
        with self._lock:
            hparams, options = self._optim.hyperparameters(), self._optim.options()
            for g, saved in enumerate(state_dict["param_groups"][: len(hparams)]):
                values = {k: v for k, v in saved.items() if k != "params"}
                _, updates, _ = configuration.group_update(self._class, hparams[g], options[g], values)
                self._check_fused(g, dict(options[g], **updates))
            self._optim.load_state_dict(state_dict)
            self._configure(range(len(hparams)), with_state=True)

    def hyperparameters(self) -> List[Dict[str, float]]:
        """Each group's numeric hyperparameters.

        Returns:
            List[Dict[str, float]]: one new dict per group, functional names (tuples split:
            ``beta1``, ``beta2``...), a Tensor hyperparameter's value read now.

        Raises nothing for a live optimizer.
        """
        with self._lock:
            return self._optim.hyperparameters()

    def options(self) -> List[Dict[str, Optional[bool]]]:
        """Each group's flags.

        Returns:
            List[Dict[str, Optional[bool]]]: one new dict per group (``maximize``, ``foreach``,
            ``fused``, ...; ``foreach`` and ``fused`` may be None).

        Raises nothing for a live optimizer.
        """
        with self._lock:
            return self._optim.options()

    def tensor_hyperparameters(self) -> List[Dict[str, Tensor]]:
        """Each group's hyperparameters given as Tensors, which its steps follow.

        Returns:
            List[Dict[str, Tensor]]: one new dict per group, functional names, the Tensors
            themselves (1 element each, any floating dtype and device; changed in place, they
            take effect at the next step).

        Raises nothing for a live optimizer.
        """
        with self._lock:
            return [dict(zip(plan.tensor_names, plan.tensor_values)) for plan in configuration.step_plans(self._optim)]

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
                the group off the fused implementation (``foreach=True``, ``fused=False``...).
        """
        with self._lock:
            configuration.check_group_index(group, len(self._optim.param_groups))
            self._check_fused(group, dict(self._optim.options()[group], **options))
            configuration.set_group(self._optim, group, {k: float(v) for k, v in hparams.items()}, options,
                                    tensor_hparams)
            self._configure([group], with_state=False)

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

    def _check_fused(self, group: int, options: Dict[str, Optional[bool]]) -> None:
        """Raises ``RuntimeError`` unless group ``group`` with flags ``options`` runs the fused
        implementation (the one the C++ object steps)."""
        if configuration.implementation(self._optim, group, options) != "fused":
            shown = {k: options.get(k) for k in ("foreach", "fused")}
            raise RuntimeError(
                f"parameter group {group} would no longer run the fused implementation with "
                f"foreach={shown['foreach']} and fused={shown['fused']}; a native local optimizer steps only fused groups"
            )

    def _configure(self, groups: Iterable[int], with_state: bool) -> None:
        """Hands the C++ object the plans of ``groups`` and, ``with_state``, the state
        ``functional_optim`` made (at construction: Adagrad's) or loaded, which the C++ object
        keeps from then on (the ``functional_optim`` optimizer keeps none). The caller holds
        ``self._lock`` (or is the constructor)."""
        plans = configuration.step_plans(self._optim)
        groups = list(groups)
        state = None
        if with_state:
            state = {int(i): dict(entry) for i, entry in self._optim.get_state().items()}
        self._object.configure(
            groups, [plans[g].names for g in groups], [plans[g].values for g in groups],
            [plans[g].tensor_names for g in groups], [plans[g].tensor_values for g in groups],
            [plans[g].sparse_error for g in groups], state,
        )
        if with_state:
            self._optim.set_state({})

    def __repr__(self) -> str:
        return f"NativeLocalOptimizer({self._class.__name__}, handle={self._handle})"
