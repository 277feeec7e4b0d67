"""Remote modules whose forward pass the owner runs natively: exported once with
``torch.export`` on the owner, then run there op by op by C++ through the dispatcher, without
Python, without its GIL and without TorchScript.

:class:`RemoteModule` is ``torch.distributed.nn.RemoteModule``'s counterpart (the same
constructor, ``forward``/``forward_async``, ``remote_parameters``, ``get_module_rref``; pickled
into an RPC it works on the worker that receives it), for modules that ``torch.export`` can
export: torch's gets a GIL-free forward only from TorchScript, which torch is removing.
"""
from typing import Any, Dict, List, Optional

import torch
import torch.distributed.rpc as rpc
from torch.utils import _pytree as pytree

from .. import _rpc_functions, ops
from .._errors import raise_on_worker
from ..rpc import _worker_names
from . import _lower, _owner

__all__ = ["RemoteModule"]

_UNSUPPORTED = ("parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
                "modules", "named_modules", "register_buffer", "register_parameter", "add_module", "state_dict",
                "load_state_dict", "apply", "cuda", "cpu", "to", "type", "float", "double", "half", "bfloat16",
                "zero_grad", "share_memory", "requires_grad_", "register_module")


def _device_map_set(worker: str) -> bool:
    """Whether this worker's RPC agent has a device map towards ``worker`` (then CUDA tensors
    cross as they are; without one, the owner answers with CPU tensors, as torch's RemoteModule
    does). torch internal relied on (listed in plugin/csrc/compat.h): the agent's
    ``_get_device_map``, which torch's RemoteModule reads the same way."""
    agent = rpc.api._get_current_rpc_agent()
    return bool(agent._get_device_map(rpc.get_worker_info(worker)))


def _parse_remote_device(remote_device: Any):
    """``(worker name, device)`` of ``"worker/cpu"``, ``"worker/cuda:0"`` or ``"rank:N/cpu"``, parsed
    by torch's own parser (``torch.distributed.remote_device._remote_device``, which torch's
    RemoteModule uses; listed in plugin/csrc/compat.h), a rank named by the worker of that rank in
    the current group."""
    from torch.distributed.remote_device import _remote_device

    if not isinstance(remote_device, (str, _remote_device)):
        raise TypeError(f"RemoteModule: remote_device must be a str such as 'worker1/cpu', got "
                        f"{type(remote_device).__name__}")
    parsed = _remote_device(remote_device) if isinstance(remote_device, str) else remote_device
    worker = parsed.worker_name()
    if worker is None:
        names = _worker_names()  # ordered by worker id, which is the rank
        if not 0 <= parsed.rank() < len(names):
            raise ValueError(f"RemoteModule: remote_device {remote_device!r}: no worker has rank {parsed.rank()}")
        worker = names[parsed.rank()]
    return worker, parsed.device()


def _check_arguments(example_inputs: Any, dynamic_shapes: Any, fallback: Any) -> None:
    """The constructor's checks of its own arguments, before anything is sent."""
    if fallback not in (None, "python"):
        raise ValueError(f"RemoteModule: fallback must be None or 'python', got {fallback!r}")
    if not isinstance(example_inputs, tuple):
        raise TypeError(f"RemoteModule: example_inputs must be a tuple of the forward's positional arguments, got "
                        f"{type(example_inputs).__name__}")
    if dynamic_shapes is None:
        for path, leaf in _lower.default_dynamic_inputs(example_inputs):
            if leaf.shape[0] < 2:
                raise ValueError(
                    f"RemoteModule: example_inputs{pytree.keystr(path)} has size {leaf.shape[0]} in dimension 0, which "
                    f"the default dynamic_shapes makes dynamic: torch.export can do that only from an example of 2 or "
                    f"more (it would fix the size to {leaf.shape[0]}); give a larger example, or dynamic_shapes")


class RemoteModule(torch.nn.Module):
    """A module built on another worker (its *owner*), whose forward pass the owner runs natively.

    On the owner, at construction: ``module_cls(*args, **kwargs)`` is built and moved to the
    device of ``remote_device``, exported with ``torch.export.export(module, example_inputs,
    dynamic_shapes=...)`` in its current mode (train), lowered to a list of operator calls that C++
    runs through the dispatcher, and registered under a handle. Each :meth:`forward` is then a
    native RPC function: the owner checks the inputs against the export (dtypes, number of
    dimensions, sizes, and the range of each dynamic dimension) and runs the program on its RPC
    thread, without its GIL and without TorchScript; Python on the owner plays no part.

    Autograd: inside a distributed autograd context (``with
    torch.distributed.autograd.context()``, grad mode on) the forward is recorded as torch's RPC
    records a call (a send function for the inputs that require grad and the outputs, recv
    functions on the other side), so ``plugin.autograd.backward`` and torch's
    ``dist_autograd.backward`` run the backward pass through the owner's operators and the
    parameters' gradients accumulate in the context on the owner, for a ``DistributedOptimizer``
    over :meth:`remote_parameters`. Outside a context nothing is recorded.

    Parameters and concurrent trainers: the module's parameters are its live parameters (an
    optimizer step is seen by the next forward). Each forward reads a *snapshot* of them: one
    copy of every parameter taken under the parameters' locks (the ones the plugin's optimizer
    steps hold), shared by all forwards until a step changes a parameter (its version counter
    moves), after which the next forward takes a new one. A backward therefore computes the
    gradients at the weights its own forward used, whatever other trainers stepped in between
    (asynchronous SGD's semantics), never autograd's "modified by an inplace operation" error,
    and a step waits for a forward only while it copies the parameters (never for a backward).
    Cost: one copy of the parameters per step that a
    forward follows (``docs/remote_modules.md`` measures it). Buffers are the live buffers:
    BatchNorm's running statistics update in place in train mode, as in eager mode; the
    operators that take a buffer run one at a time per module, so concurrent forwards' updates
    do not race. (An optimizer that writes the parameters without this library's locks, torch's
    own DistributedOptimizer, may be read mid-step.)

    Args:
        remote_device (str): ``"<worker name>/<device>"`` or ``"rank:<rank>/<device>"``
            (``"worker1/cpu"``, ``"trainer0/cuda:0"``), as torch's RemoteModule takes it. A CUDA
            device runs the program on that GPU of the owner; CPU inputs are moved there, and the
            outputs come back on the CPU unless this worker has a device map towards the owner.
        module_cls (Callable[..., torch.nn.Module]): the module's class (or a function building
            it), pickled by reference: the owner must be able to import it.
        args (tuple, optional): positional arguments of ``module_cls``.
        kwargs (dict, optional): keyword arguments of ``module_cls``.
        example_inputs (tuple): the forward's positional arguments for the export: tensors, and
            (nested) tuples and lists of tensors, on any device (moved to the module's).
        dynamic_shapes (optional): torch.export's ``dynamic_shapes`` for ``example_inputs``.
            Default: dimension 0 of every tensor input dynamic (``Dim.AUTO``; the example's size
            there must be 2 or more, or torch.export fixes it), every other dimension fixed.
        fallback (str, optional): ``"python"`` runs a module that cannot run natively (below) by
            a pickled Python call of its forward on the owner, as torch's RemoteModule without
            TorchScript does (``.native`` is then False and ``.reason`` says why); ``None`` (the
            default) raises instead.

    Attributes:
        on (str): the owner's worker name. device (torch.device): the module's device there.
        native (bool): whether the forward runs natively. reason (str or None): why not.
        module_rref (RRef[torch.nn.Module]): the module on its owner.

    Raises:
        RuntimeError: the module cannot run natively (and ``fallback`` is None): torch.export
            refused it (its message follows), or its program holds an operator whose kernel is
            written in Python, a higher-order operator other than the grad-mode regions of
            ``torch.no_grad()``, or another Python call; the message names the module's class,
            the owner, the node and the operator. Also: building the module raised on the owner
            (its error, naming the owner).
        TypeError: ``example_inputs`` is not a tuple; ``remote_device`` is not a string.
        ValueError: ``fallback`` is neither None nor ``"python"``; ``remote_device`` names no worker; with
            the default ``dynamic_shapes``, an example tensor with fewer than 2 rows (torch.export
            would fix its dimension 0).

    Source: ``torch.distributed.nn.RemoteModule`` (its interface), ``torch.export`` (the program).
    """

    def __init__(self, remote_device: str, module_cls: Any, args: Optional[tuple] = None,
                 kwargs: Optional[Dict[str, Any]] = None, *, example_inputs: tuple,
                 dynamic_shapes: Any = None, fallback: Optional[str] = None) -> None:
        super().__init__()
        _check_arguments(example_inputs, dynamic_shapes, fallback)
        worker, device = _parse_remote_device(remote_device)
        name = getattr(module_cls, "__qualname__", type(module_cls).__name__)
        try:
            module_rref = rpc.remote(worker, _owner.create,
                                     args=(module_cls, tuple(args or ()), dict(kwargs or {}), str(device)))
        except Exception as error:  # noqa: BLE001 (raised again, naming the owner)
            raise_on_worker(worker, f"the construction of {name}", error, "RemoteModule")
        self._prepare(worker, device, name, module_rref, example_inputs, dynamic_shapes, fallback)

    @classmethod
    def init_from_module_rref(cls, remote_device: str, module_rref: rpc.RRef, *, example_inputs: tuple,
                              dynamic_shapes: Any = None, fallback: Optional[str] = None) -> "RemoteModule":
        """A RemoteModule of a module that exists already on its owner, as torch's
        ``RemoteModule.init_from_module_rref``; exported and registered there as the constructor
        does (once per module: a second RemoteModule of the same module shares its registration).

        Args:
            remote_device (str): as the constructor's; its worker must own ``module_rref``.
            module_rref (RRef[torch.nn.Module]): the module, owned by ``remote_device``'s worker.
            example_inputs (tuple): as the constructor's.
            dynamic_shapes (optional): as the constructor's.
            fallback (str, optional): as the constructor's.

        Returns:
            RemoteModule: the remote module of ``module_rref``.

        Raises:
            ValueError: ``module_rref``'s owner is not ``remote_device``'s worker; and the
                constructor's errors (its ``RuntimeError``, ``TypeError`` and ``ValueError``).
        """
        worker, device = _parse_remote_device(remote_device)
        if module_rref.owner().name != worker:
            raise ValueError(f"RemoteModule.init_from_module_rref: module_rref is owned by "
                             f"{module_rref.owner().name!r}, not by remote_device's worker {worker!r}")
        _check_arguments(example_inputs, dynamic_shapes, fallback)
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        module._prepare(worker, device, "the module", module_rref, example_inputs, dynamic_shapes, fallback)
        return module

    def _prepare(self, worker: str, device: torch.device, name: str, module_rref: rpc.RRef, example_inputs: tuple,
                 dynamic_shapes: Any, fallback: Optional[str]) -> None:
        self._init_state({"on": worker, "device": str(device), "name": name})
        try:
            info = rpc.rpc_sync(worker, _owner.prepare, args=(module_rref, example_inputs, dynamic_shapes, fallback))
        except Exception as error:  # noqa: BLE001 (raised again, naming the owner)
            raise_on_worker(worker, f"the construction of {name}", error, "RemoteModule")
        self._init_state({**self._state, **info, "module_rref": module_rref})

    def _init_state(self, state: Dict[str, Any]) -> None:
        object.__setattr__(self, "_state", state)
        object.__setattr__(self, "on", state["on"])
        object.__setattr__(self, "device", torch.device(state["device"]))
        object.__setattr__(self, "native", state.get("native", False))
        object.__setattr__(self, "reason", state.get("reason"))
        if "module_rref" in state:
            object.__setattr__(self, "module_rref", state["module_rref"])
        if state.get("native"):
            object.__setattr__(self, "_handle", state["handle"])
            object.__setattr__(self, "_in_spec", pytree.treespec_loads(state["in_spec"]))
            object.__setattr__(self, "_out_spec", pytree.treespec_loads(state["out_spec"]))
        object.__setattr__(self, "_owner_id", None)
        object.__setattr__(self, "_device_map", None)
        object.__setattr__(self, "training", state.get("training", True))

    def __repr__(self) -> str:
        return (f"RemoteModule({self._state['name']} on {self.on!r}, device={self.device}, "
                f"{'native' if self.native else 'python'})")

    def __reduce__(self):
        # Pickled into an RPC (the RRef pickles only there), it works on the worker that receives it.
        return _rebuild, ({k: v for k, v in self._state.items()},)

    # --- the forward pass ---------------------------------------------------------------------

    def forward_async(self, *args: Any) -> torch.futures.Future:
        """The forward pass on ``args``, run by the owner; a ``torch.futures.Future`` of its output
        (tensors, and tuples and lists of them, as the module returns them).

        Inputs: each tensor of the dtype and number of dimensions of the example, each dimension
        the example's size or, for a dynamic one, a size in the range torch.export allows (one
        size for the dimensions it ties together), dense, on the CPU or the module's device.
        Inside a distributed autograd context with grad mode on, the call is recorded there
        (see the class); the context must still be live when the answer arrives.

        Args:
            *args: the module's positional arguments: tensors, and tuples and lists of them, of
                the export's structure (shapes, dtypes and devices as above).

        Returns:
            torch.futures.Future: completes with the output, or with an error that names the
            owner and the module (``"RemoteModule.forward: the forward of <Cls> failed on owner
            '<worker>': ..."``, then the owner's message: an input that does not fit, naming it;
            an operator's error with its node; no answer within the RPC timeout; the
            connection lost); or with a ``RuntimeError`` when the context was released on this
            worker before the answer arrived (nothing is recorded, the owner is told).

        Raises:
            TypeError: ``args`` is not of the export's structure, or holds something other than
                a tensor.
            RuntimeError: this thread's distributed autograd context was released; RPC is not
                running.
        """
        name = self._state["name"]
        if not self.native:
            return rpc.rpc_async(self.on, _owner.python_forward, args=(self.module_rref, *args))
        flat, spec = pytree.tree_flatten((args, {}))
        if spec != self._in_spec:
            raise TypeError(f"RemoteModule.forward of {name} on {self.on!r}: the inputs must have the structure of "
                            f"the example inputs ({self._in_spec}), got {spec}")
        for i, value in enumerate(flat):
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"RemoteModule.forward of {name} on {self.on!r}: input {i} (flattened) must be a "
                                f"Tensor, got {type(value).__name__}")
        what = f"the forward of {name}"
        if self._owner_id is None:
            object.__setattr__(self, "_owner_id", rpc.get_worker_info(self.on).id)
            object.__setattr__(self, "_device_map", self.device.type == "cuda" and _device_map_set(self.on))
        owner, out_spec = self._owner_id, self._out_spec
        context_id, request_id = ops._begin_call(f"RemoteModule.forward of {name}", -1, owner,
                                                 [t.requires_grad for t in flat])
        mask = [t.requires_grad for t in flat] if request_id >= 0 else [False] * len(flat)
        sent = [t for t, marked in zip(flat, mask) if marked]
        try:
            answer = _rpc_functions.call(
                self.on, "_nn_forward", (self._handle, context_id, request_id, flat, mask, self._device_map))
        except Exception as error:  # noqa: BLE001 (raised again, naming the owner)
            raise_on_worker(self.on, what, error, "RemoteModule.forward")

        # (errors set on a future of its own: raised in a `then` callback, they would come out of
        # wait() as RuntimeErrors wrapped in torch's text about the callback)
        done = torch.futures.Future()

        def recorded(arrived: torch.futures.Future) -> None:
            try:
                try:
                    outputs, requires_grad, answer_id = arrived.value()
                except Exception as error:  # noqa: BLE001 (raised again, naming the owner)
                    raise_on_worker(self.on, what, error, "RemoteModule.forward")
                outputs = ops._record_call(f"RemoteModule.forward of {name}", context_id, request_id, sent, answer_id,
                                           owner, outputs, requires_grad)
                done.set_result(pytree.tree_unflatten(outputs, out_spec))
            except Exception as error:  # noqa: BLE001 (handed to the future)
                done.set_exception(error)

        answer.add_done_callback(recorded)
        return done

    def forward(self, *args: Any) -> Any:
        """:meth:`forward_async`'s result, waited for.

        Args:
            *args: as :meth:`forward_async`'s (tensors of the example's dtypes and number of
                dimensions, on the CPU or the module's device).

        Returns:
            Any: the module's output: tensors, and tuples and lists of them.

        Raises:
            RuntimeError: the error :meth:`forward_async`'s future completes with (naming the
                owner), and :meth:`forward_async`'s own.
            TypeError: as :meth:`forward_async`.
        """
        return self.forward_async(*args).wait()

    # --- the module on its owner ------------------------------------------------------------------

    def train(self, mode: bool = True) -> "RemoteModule":
        """Sets the module's mode on its owner (``module.train(mode)``); a native module's next
        forwards run the program of that mode (exported on the owner the first time it is asked
        for). torch's RemoteModule refuses to switch modes; this one does. Forwards already
        running finish in the mode they started in.

        Args:
            mode (bool): True for train mode, False for eval mode.

        Returns:
            RemoteModule: ``self``.

        Raises:
            ValueError: ``mode`` is not a bool.
            RuntimeError: the export of that mode failed on the owner (its error, naming the
                owner); the owner cannot be reached. The mode is then unchanged.
        """
        if not isinstance(mode, bool):
            raise ValueError(f"RemoteModule.train: mode must be a bool, got {type(mode).__name__}")
        try:
            rpc.rpc_sync(self.on, _owner.set_training, args=(self.module_rref, mode))
        except Exception as error:  # noqa: BLE001 (raised again, naming the owner)
            raise_on_worker(self.on, f"switching {self._state['name']} to {'train' if mode else 'eval'} mode", error,
                            "RemoteModule.train")
        object.__setattr__(self, "training", mode)
        self._state["training"] = mode
        return self

    def remote_parameters(self, recurse: bool = True) -> List[rpc.RRef]:
        """RRefs to the module's live parameters on its owner, for
        ``plugin.optim.DistributedOptimizer`` or torch's.

        Args:
            recurse (bool): as ``module.parameters(recurse)``: the submodules' parameters too.

        Returns:
            List[RRef]: one RRef per parameter, in ``module.parameters(recurse)``'s order.

        Raises:
            RuntimeError: the owner cannot be reached (RPC's error).
        """
        return rpc.rpc_sync(self.on, _owner.parameter_rrefs, args=(self.module_rref, recurse))

    def get_module_rref(self) -> rpc.RRef:
        """The module on its owner.

        Returns:
            RRef: the RRef to the ``nn.Module`` on its owner.

        Raises nothing.
        """
        return self.module_rref

    def _debug_info(self) -> Dict[str, int]:
        """The owner's counters of a native module: ``forwards`` run, ``snapshots`` of the
        parameters taken, ``training`` (1 or 0); ``{}`` for a module that runs in Python."""
        return rpc.rpc_sync(self.on, _owner.info, args=(self.module_rref,))


def _not_supported(method: str):
    def refuse(self, *args, **kwargs):
        raise ValueError(f"Method ``{method}`` not supported for RemoteModule (the module lives on {self.on!r}: "
                         f"use remote_parameters() or get_module_rref())")
    refuse.__name__, refuse.__qualname__ = method, f"RemoteModule.{method}"
    refuse.__doc__ = (
        f"""Not supported on a remote module, as on torch's RemoteModule: the module and its
        parameters live on the owner. Use :meth:`remote_parameters` or :meth:`get_module_rref`.

        Args:
            *args: ignored.
            **kwargs: ignored.

        Raises:
            ValueError: always ("Method ``{method}`` not supported for RemoteModule ...").
        """
    )
    return refuse


for _method in _UNSUPPORTED:
    setattr(RemoteModule, _method, _not_supported(_method))


def _rebuild(state: Dict[str, Any]) -> RemoteModule:
    module = RemoteModule.__new__(RemoteModule)
    torch.nn.Module.__init__(module)
    module._init_state(state)
    return module
