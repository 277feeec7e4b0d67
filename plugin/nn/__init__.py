"""Remote modules whose forward pass the owner runs natively: exported once with
``torch.export`` on the owner, then run there op by op by C++ through the dispatcher, without
Python, without its GIL and without TorchScript.

:class:`RemoteModule` is ``torch.distributed.nn.RemoteModule``'s counterpart (the same
constructor, ``forward``/``forward_async``, ``remote_parameters``, ``get_module_rref``; pickled
into an RPC it works on the worker that receives it), for modules that ``torch.export`` can
export: torch's gets a GIL-free forward only from TorchScript, which torch is removing.
"""
import warnings
from typing import Any, Dict, List, Optional

import torch
import torch.distributed.rpc as rpc
from torch.utils import _pytree as pytree

from .. import _rpc_functions, ops
from .._errors import raise_on_worker, relay
from ..rpc import _worker_names
from . import _owner

__all__ = ["RemoteModule"]

_UNSUPPORTED = ("parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
                "modules", "named_modules", "register_buffer", "register_parameter", "add_module", "state_dict",
                "load_state_dict", "apply", "cuda", "cpu", "to", "type", "float", "double", "half", "bfloat16",
                "zero_grad", "share_memory", "requires_grad_", "register_module", "register_backward_hook",
                "register_forward_pre_hook", "register_forward_hook", "extra_repr")


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


def _check_arguments(example_inputs: Any, fullgraph: Any) -> None:
    """The constructor's checks of its own arguments, before anything is sent."""
    if not isinstance(fullgraph, bool):
        raise TypeError(f"RemoteModule: fullgraph must be a bool, got {type(fullgraph).__name__}")
    if example_inputs is not None and not isinstance(example_inputs, tuple):
        raise TypeError(f"RemoteModule: example_inputs must be a tuple of the forward's positional arguments, got "
                        f"{type(example_inputs).__name__}")
    if example_inputs is not None:  # sent to the owner by torch's RPC, as the forward's arguments are
        _refuse_nested("RemoteModule: example_inputs", example_inputs, {})


_ATOMS = (int, float, bool, str, type(None))


def _call_key(args: tuple, kwargs: Dict[str, Any], training: bool):
    """``(key, flat leaves)`` of a call: the key is what torch.export specializes a program on
    (the call's structure, each tensor's dtype and number of dimensions, the other leaves'
    types and values, the mode); None for a call with a leaf the native forward cannot take."""
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    parts = []
    for leaf in flat:
        if isinstance(leaf, torch.Tensor):
            parts.append(("T", str(leaf.dtype), leaf.dim()))
        elif type(leaf) in _ATOMS:
            parts.append(("V", type(leaf).__name__, leaf))
        else:
            return None, flat
    try:
        structure = pytree.treespec_dumps(spec)
    except Exception:  # noqa: BLE001 (a container pytree cannot write: the Python path)
        return None, flat
    return (structure, tuple(parts), bool(training)), flat


def _refuse_nested(prefix: str, args: tuple, kwargs: Dict[str, Any]) -> None:
    """Raises ``ValueError`` for the first nested tensor among the call's arguments, naming it:
    torch's RPC cannot send one (its serializer aborts the caller's process, torch 2.13: for the
    native call and for a pickled Python call alike), so it is refused before anything is sent."""
    for path, leaf in pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))[0]:
        if isinstance(leaf, torch.Tensor) and leaf.is_nested:
            where = ("args" if path[0].idx == 0 else "kwargs") + pytree.keystr(path[1:])
            raise ValueError(f"{prefix}: argument {where} must be a dense (strided) tensor, got a nested tensor "
                             f"(layout {leaf.layout}); torch's RPC cannot send one")


class RemoteModule(torch.nn.Module):
    """A module built on another worker (its *owner*), whose forward pass the owner runs natively
    wherever ``torch.export`` captures it; a drop-in for ``torch.distributed.nn.RemoteModule``.

    On the owner, at construction: ``module_cls(*args, **kwargs)`` is built and moved to the
    device of ``remote_device``. At the first forward of each *call key* (the structure of the
    call's positional and keyword arguments, each tensor's dtype and number of dimensions, the
    values of the other arguments, the mode) the owner exports the module with ``torch.export``
    from that call's arguments, dimension 0 of every tensor dynamic (a first batch of 1 too), the
    other arguments constants of the program; lowers it to a list of operator calls that C++ runs
    through the dispatcher, and registers it under a handle. Two first calls of one key at once
    export once. Each forward of a key that has a program is then a native RPC function: the
    owner checks the tensors against the program (dtypes, number of dimensions, sizes, and the
    range of each dynamic dimension) and runs it on its RPC thread, without its GIL and without
    TorchScript. Results keep their Python types (an int stays an int). A module keeps at most
    ``plugin.nn._owner.PROGRAM_CACHE_BOUND`` (8) programs; a call of a further key runs by the
    Python path, with one warning.

    Where torch.export cannot capture a call (data-dependent control flow, an operator with a
    Python kernel, a Python call in the graph) the call runs as torch's RemoteModule runs it, by
    a pickled Python forward on the owner: ``.native`` becomes False, ``.reason`` says why, and
    one warning per module says so; ``fullgraph=True`` raises instead (the module unchanged).

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
    steps hold), shared by all forwards of a program until a step changes a parameter (its
    version counter moves), after which the next forward takes a new one. A backward therefore
    computes the gradients at the weights its own forward used, whatever other trainers stepped
    in between (asynchronous SGD's semantics), never autograd's "modified by an inplace
    operation" error, and a step waits for a forward only while it copies the parameters.
    Cost: one copy of the parameters per step that a forward follows (per program).
    Buffers are the live buffers: BatchNorm's running statistics update in place in train
    mode, as in eager mode; the operators of one program that take a buffer run one at a time.
    (An optimizer that writes the parameters without this library's locks, torch's own
    DistributedOptimizer, may be read mid-step.)

    Args:
        remote_device (str): ``"<worker name>/<device>"`` or ``"rank:<rank>/<device>"``
            (``"worker1/cpu"``, ``"trainer0/cuda:0"``), as torch's RemoteModule takes it. A CUDA
            device runs the program on that GPU of the owner; CPU inputs are moved there, and the
            outputs come back on the CPU unless this worker has a device map towards the owner.
        module_cls (Callable[..., torch.nn.Module]): the module's class (or a function building
            it), pickled by reference: the owner must be able to import it.
        args (tuple, optional): positional arguments of ``module_cls``.
        kwargs (dict, optional): keyword arguments of ``module_cls``.
        example_inputs (tuple, optional): a hint: the forward's positional arguments of a first
            call, exported at construction (tensors on any device, and other values, in tuples,
            lists and dicts). Default: export at the first forward.
        dynamic_shapes (optional): a hint: torch.export's ``dynamic_shapes`` for
            ``example_inputs``. Default: dimension 0 of every tensor dynamic.
        fullgraph (bool): raise, rather than run a call by the Python path, where torch.export
            cannot capture it (as ``torch.compile(fullgraph=True)``). Replaces ``fallback``:
            ``fallback="python"`` is now the default, ``fallback=None`` is ``fullgraph=True``.

    Pickling: as torch's, only into an RPC (``torch.save`` raises ``RuntimeError``); the receiver
    gets the owner, device, mode, module RRef and the programs' handles known so far, not the
    attributes set on the object after construction.

    Attributes:
        on (str): the owner's worker name. device (torch.device): the module's device there.
        native (bool): whether every call so far ran natively. reason (str or None): why not.
        module_rref (RRef[torch.nn.Module]): the module on its owner.

    Raises:
        RuntimeError: with ``fullgraph``, a call (the example's at construction) that cannot run
            natively: torch.export's reason, or the node and operator that need Python; the
            message names the module's class and the owner. Also: building the module raised on
            the owner (its error, naming the owner).
        TypeError: ``example_inputs`` is not a tuple; ``fullgraph`` is not a bool;
            ``remote_device`` is not a string.
        ValueError: ``remote_device`` names no worker; ``module_cls`` does not build an
            ``nn.Module`` (torch's message); a nested tensor (``torch.nested``) among
            ``example_inputs``, which torch's RPC cannot send (refused before anything is sent).

    Source: ``torch.distributed.nn.RemoteModule`` (its interface), ``torch.export`` (the program),
    ``torch.compile`` (export at the first call, one program per guard set, eager where it
    cannot capture).
    """

    def __init__(self, remote_device: str, module_cls: Any, args: Optional[tuple] = None,
                 kwargs: Optional[Dict[str, Any]] = None, *, example_inputs: Optional[tuple] = None,
                 dynamic_shapes: Any = None, fullgraph: bool = False) -> None:
        super().__init__()
        _check_arguments(example_inputs, fullgraph)
        worker, device = _parse_remote_device(remote_device)
        name = getattr(module_cls, "__qualname__", type(module_cls).__name__)
        try:
            module_rref = rpc.remote(worker, _owner.create,
                                     args=(module_cls, tuple(args or ()), dict(kwargs or {}), str(device)))
        except Exception as error:  # noqa: BLE001 (raised again, naming the owner)
            raise_on_worker(worker, f"the construction of {name}", error, "RemoteModule")
        self._prepare(worker, device, name, module_rref, example_inputs, dynamic_shapes, fullgraph)

    @classmethod
    def init_from_module_rref(cls, remote_device: str, module_rref: rpc.RRef, _module_interface_cls: Any = None, *,
                              example_inputs: Optional[tuple] = None, dynamic_shapes: Any = None,
                              fullgraph: bool = False) -> "RemoteModule":
        """A RemoteModule of a module that exists already on its owner, as torch's
        ``RemoteModule.init_from_module_rref``; its programs are the module's (a second
        RemoteModule of the same module shares them).

        Args:
            remote_device (str): as the constructor's; the forward runs on ``module_rref``'s
                owner (the module lives there), its device is this one's.
            module_rref (RRef[torch.nn.Module]): the module.
            _module_interface_cls: torch's TorchScript interface; must be None (no TorchScript).
            example_inputs (tuple, optional): as the constructor's.
            dynamic_shapes (optional): as the constructor's.
            fullgraph (bool): as the constructor's.

        Returns:
            RemoteModule: the remote module of ``module_rref``.

        Raises:
            ValueError: ``_module_interface_cls`` is given; and the constructor's errors (its
                ``RuntimeError``, ``TypeError`` and ``ValueError``).
        """
        if _module_interface_cls is not None:
            raise ValueError("RemoteModule.init_from_module_rref: _module_interface_cls (TorchScript) is not "
                             "supported: plugin.nn.RemoteModule runs without TorchScript")
        _, device = _parse_remote_device(remote_device)
        _check_arguments(example_inputs, fullgraph)
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        module._prepare(module_rref.owner().name, device, "the module", module_rref, example_inputs, dynamic_shapes,
                        fullgraph)
        return module

    def _prepare(self, worker: str, device: torch.device, name: str, module_rref: rpc.RRef,
                 example_inputs: Optional[tuple], dynamic_shapes: Any, fullgraph: bool) -> None:
        self._init_state({"on": worker, "device": str(device), "name": name, "fullgraph": fullgraph,
                          "programs": {}, "module_rref": module_rref})
        try:
            described = rpc.rpc_sync(worker, _owner.describe, args=(module_rref,))
        except Exception as error:  # noqa: BLE001 (raised again, naming the owner)
            raise_on_worker(worker, f"the construction of {name}", error, "RemoteModule")
        self._state.update(described)
        object.__setattr__(self, "training", described["training"])
        if example_inputs is not None:
            key, _ = _call_key(example_inputs, {}, self.training)
            self._entry(key, example_inputs, {}, dynamic_shapes, "the construction")

    def _init_state(self, state: Dict[str, Any]) -> None:
        object.__setattr__(self, "_state", state)
        object.__setattr__(self, "on", state["on"])
        object.__setattr__(self, "device", torch.device(state["device"]))
        object.__setattr__(self, "native", state.get("native", True))
        object.__setattr__(self, "reason", state.get("reason"))
        object.__setattr__(self, "module_rref", state["module_rref"])
        object.__setattr__(self, "_programs", state["programs"])
        object.__setattr__(self, "_owner_id", None)
        object.__setattr__(self, "_device_map", None)
        object.__setattr__(self, "training", state.get("training", True))

    @property
    def _handle(self) -> int:
        """The handle of the first native program (tests)."""
        return next(e["handle"] for e in self._programs.values() if "handle" in e)

    def __repr__(self) -> str:
        return (f"RemoteModule({self._state['name']} on {self.on!r}, device={self.device}, "
                f"{'native' if self.native else 'python'})")

    def __reduce__(self):
        # torch's RemoteModule's rule: pickled only into an RPC (by _reduce, registered with RPC's
        # pickler below), never by Python's pickler (torch.save).
        raise RuntimeError("Cannot pickle RemoteModule in python pickler. RemoteModule can only be pickled when "
                           "using RPC")

    def _reduce(self):
        state = dict(self._state, native=self.native, reason=self.reason, training=self.training,
                     programs={k: {n: v for n, v in e.items() if n != "_spec"} for k, e in self._programs.items()})
        return _rebuild, (state,)

    # --- the programs -----------------------------------------------------------------------------

    def _entry(self, key: Any, args: tuple, kwargs: Dict[str, Any], dynamic_shapes: Any, what: str) -> Dict[str, Any]:
        """The program entry of call key ``key``: this object's, else the owner's (exported there
        the first time)."""
        name = self._state["name"]
        if key is None:
            entry = {"python": "an argument the native forward does not take (it takes tensors, int, float, bool, "
                               "str and None, in tuples, lists and dicts)"}
            if self._state.get("fullgraph"):
                raise TypeError(f"RemoteModule.forward of {name} on {self.on!r}: {entry['python']} (fullgraph=True)")
        else:
            entry = self._programs.get(key)
        if entry is None:
            # (on the CPU: a CUDA tensor crosses only under a device map; the owner moves them)
            detached = pytree.tree_map_only(torch.Tensor, lambda t: t.detach().cpu(), (tuple(args), dict(kwargs)))
            previous = ops._swap_current_context(-1)  # a control call: nothing to record
            try:
                entry = rpc.rpc_sync(self.on, _owner.program_for,
                                     args=(self.module_rref, key, *detached, dynamic_shapes,
                                           bool(self._state.get("fullgraph"))))
            except Exception as error:  # noqa: BLE001 (raised again, naming the owner)
                raise_on_worker(self.on, f"{what} (the export) of {name}", error, "RemoteModule")
            finally:
                ops._swap_current_context(previous)
            self._programs[key] = entry
        if "python" in entry and self.native:
            object.__setattr__(self, "native", False)
            object.__setattr__(self, "reason", entry["python"])
            warnings.warn(f"RemoteModule: {name} on {self.on!r} runs (some calls) by the Python path, as torch's "
                          f"RemoteModule: {entry['python']}", stacklevel=4)
        return entry

    # --- the forward pass ---------------------------------------------------------------------

    def forward_async(self, *args: Any, **kwargs: Any) -> torch.futures.Future:
        """The forward pass on ``args`` and ``kwargs``, run by the owner; a
        ``torch.futures.Future`` of its output, with the module's Python types.

        A call whose key has a program runs it natively (exported at the key's first call, see
        the class); its tensors are checked against it: the dtype and number of dimensions of
        the key, each dimension the export's size or, for a dynamic one, a size in the range
        torch.export allows, dense, on the CPU or the module's device. Other calls run by a
        pickled Python forward. Inside a distributed autograd context with grad mode on, the
        call is recorded there (see the class); the context must still be live when the answer
        arrives.

        Args:
            *args: the forward's positional arguments: tensors, int, float, bool, str and None,
                in (nested) tuples, lists and dicts.
            **kwargs: its keyword arguments, the same.

        Returns:
            torch.futures.Future: completes with the output, or with an error that names the
            owner and the module (``"RemoteModule.forward: the forward of <Cls> failed on owner
            '<worker>': ..."``, then the owner's message: an input that does not fit, naming it;
            an operator's error with its node; no answer within the RPC timeout; the
            connection lost); or with a ``RuntimeError`` when the context was released on this
            worker before the answer arrived (nothing is recorded, the owner is told).

        Raises:
            RuntimeError: with ``fullgraph``, a call that cannot run natively (the owner's
                reason); this thread's distributed autograd context was released; RPC is not
                running.
            TypeError: with ``fullgraph``, an argument the native forward does not take.
            ValueError: a nested tensor among the arguments (``torch.nested``, either layout),
                which torch's RPC cannot send (nothing is sent).
        """
        name = self._state["name"]
        key, flat = _call_key(args, kwargs, self.training)
        if any(isinstance(leaf, torch.Tensor) and leaf.is_nested for leaf in flat):
            _refuse_nested(f"RemoteModule.forward of {name} on {self.on!r}", args, kwargs)
        entry = self._programs.get(key) if key is not None else None
        if entry is None:
            entry = self._entry(key, args, kwargs, None, "the first forward")
        what = f"the forward of {name}"
        if "python" in entry:
            return self._python_forward(what, args, kwargs)
        tensors = [leaf for leaf in flat if isinstance(leaf, torch.Tensor)]
        if self._owner_id is None:
            object.__setattr__(self, "_owner_id", rpc.get_worker_info(self.on).id)
            object.__setattr__(self, "_device_map", self.device.type == "cuda" and _device_map_set(self.on))
        owner = self._owner_id
        out_spec = entry.get("_spec")
        if out_spec is None:
            out_spec = entry["_spec"] = pytree.treespec_loads(entry["out_spec"])
        template = entry["out_leaves"]
        handle, device_map = entry["handle"], self._device_map

        def leaves(outputs: List[torch.Tensor]) -> Any:
            out = []
            for item in template:
                if item[0] == "T":
                    out.append(outputs[item[1]])
                elif item[0] == "S":
                    out.append({"int": int, "float": float, "bool": bool}[item[2]](outputs[item[1]].item()))
                else:
                    out.append(item[1])
            return pytree.tree_unflatten(out, out_spec)

        return _rpc_functions.call_recorded(
            self.on, owner, "_remote_forward", -1, tensors,
            lambda ctx, message_id, mask: (handle, ctx, message_id, tensors, mask, device_map),
            lambda answer: answer, leaves, label=f"RemoteModule.forward of {name}", prefix="RemoteModule.forward",
            what=what)

    def _python_forward(self, what: str, args: tuple, kwargs: Dict[str, Any]) -> torch.futures.Future:
        """The Python path: the module's forward pickled to its owner (torch's RPC records it in the
        caller's context); its errors raised again naming the owner and the module."""
        try:
            answer = rpc.rpc_async(self.on, _owner.python_forward, args=(self.module_rref, tuple(args), dict(kwargs)))
        except Exception as error:  # noqa: BLE001 (raised again, naming the owner)
            raise_on_worker(self.on, what, error, "RemoteModule.forward")
        return relay(answer, self.on, what, "RemoteModule.forward", lambda value: value)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`forward_async`'s result, waited for.

        Args:
            *args: as :meth:`forward_async`'s.
            **kwargs: as :meth:`forward_async`'s.

        Returns:
            Any: the module's output, with its Python types.

        Raises:
            RuntimeError: the error :meth:`forward_async`'s future completes with (naming the
                owner), and :meth:`forward_async`'s own.
            TypeError: as :meth:`forward_async`.
        """
        return self.forward_async(*args, **kwargs).wait()

    # --- the module on its owner ------------------------------------------------------------------

    def train(self, mode: bool = True) -> "RemoteModule":
        """Sets the module's mode on its owner (``module.train(mode)``); the next forwards run
        the programs of that mode (each exported at its first call). torch's RemoteModule
        forwards ``train()`` to ``nn.Module.train`` on the caller only; this one sets the
        owner's module too. Forwards already running finish in the mode they started in.

        Args:
            mode (bool): True for train mode, False for eval mode.

        Returns:
            RemoteModule: ``self``.

        Raises:
            ValueError: ``mode`` is not a bool.
            RuntimeError: the owner cannot be reached. The mode is then unchanged.
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
        """The owner's counters of the module's native programs, summed: ``forwards`` run,
        ``snapshots`` of the parameters taken, ``programs``, ``training`` (1 or 0); ``{}`` for a
        module that has no native program."""
        return rpc.rpc_sync(self.on, _owner.info, args=(self.module_rref,))


def _not_supported(method: str):
    def refuse(self, *args, **kwargs):
        if method == "parameters":  # torch's message
            raise ValueError("Method ``parameters`` not supported for RemoteModule. Please use ``remote_parameters`` "
                             f"instead (the module lives on {self.on!r}).")
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


def _reduce_for_rpc(module: RemoteModule):
    return module._reduce()


# Pickled into an RPC only (torch's RemoteModule registers its reducer the same way; torch internal
# relied on: torch.distributed.rpc.internal._internal_rpc_pickler._register_reducer).
from torch.distributed.rpc.internal import _internal_rpc_pickler  # noqa: E402

_internal_rpc_pickler._register_reducer(RemoteModule, _reduce_for_rpc)
