"""What a remote module's owner runs in Python: building the module, exporting a program for a
call (at its first forward, or at construction from the example inputs), switching its mode, the
RRefs of its parameters, and the pickled forward of a call that cannot run natively. None of it
is on the native forward's path, which runs in C++ (``plugin/csrc/nn/remote_module.h``).

Each function is called by RPC from :class:`plugin.nn.RemoteModule` (by reference: the owner
imports this module) with the module's RRef, whose value is the ``nn.Module`` on this worker.

Programs: a module keeps up to :data:`PROGRAM_CACHE_BOUND` programs, one per *call key* (what
torch.export specialized on: the structure of the call's positional and keyword arguments, each
tensor's dtype and number of dimensions, the values of the other arguments, and the mode). Each
program is registered under a handle of its own (a NativeModule over the module's parameters).
"""
import threading
import weakref
from typing import Any, Dict, List, Optional

import torch
import torch.distributed.rpc as rpc
from torch.utils import _pytree as pytree

from .. import ops
from . import _lower

__all__ = ["PROGRAM_CACHE_BOUND", "create", "describe", "program_for", "set_training", "parameter_rrefs",
           "python_forward", "info"]

#: The most programs one module keeps (one per call key); a call of another key runs by the
#: Python path (a pickled forward), said once by a warning on the caller.
PROGRAM_CACHE_BOUND = 8


class _Owned:
    """A module's programs on its owner: call key -> entry (``{"handle", "out_spec", "out_leaves"}``
    for a native program, ``{"python": reason}`` for a key that runs in Python), and the
    registrations behind the handles (they live as long as this object, which lives as long as the
    module)."""

    def __init__(self, module: torch.nn.Module):
        self.params = list(module.parameters())
        self.device = self.params[0].device if self.params else next(
            (b.device for b in module.buffers()), torch.device("cpu"))
        self.entries: Dict[Any, Dict[str, Any]] = {}
        self.registrations: List[torch.ScriptObject] = []


# module -> its programs; the entry, and with it the registrations, goes with the module (no code
# runs then: a finalizer that called an op could run while torch.export traces another module on
# the same thread, and be traced into its graph)
_NATIVE: "weakref.WeakKeyDictionary[torch.nn.Module, _Owned]" = weakref.WeakKeyDictionary()
# guards _NATIVE and serializes the exports (torch.export is not thread-safe): two first calls
# of one key at once export once
_LOCK = threading.RLock()


def create(module_cls: Any, args: tuple, kwargs: Dict[str, Any], device: str) -> torch.nn.Module:
    """``module_cls(*args, **kwargs)`` moved to ``device``: the value of the RemoteModule's RRef.
    Refuses a class that does not build an ``nn.Module`` with torch's RemoteModule's error."""
    module = module_cls(*args, **kwargs)
    if not isinstance(module, torch.nn.Module):
        raise ValueError("Expect `module_cls(*args, **kwargs)` returns an instance of <class nn.Module>, "
                         f"but it returns an instance of {type(module)}.")
    return module.to(torch.device(device))


def describe(module_rref: rpc.RRef) -> Dict[str, Any]:
    """The module's class name and mode (the constructor's check that it was built)."""
    module = module_rref.local_value()
    return {"name": type(module).__qualname__, "training": module.training}


_TENSOR = object()


class _Call(torch.nn.Module):
    """The module called as one call key calls it, for torch.export: its inputs are the call's
    tensors only (the other leaves of the call are constants of the program), its output the
    tensors of the module's output (and its symbolic ints and floats, as 0-dim tensors); the
    output's structure and constant leaves are captured while torch.export traces it."""

    def __init__(self, module: torch.nn.Module, spec: Any, leaves: List[Any], captured: Dict[str, Any]):
        super().__init__()
        self.m = module
        self._call_spec, self._call_leaves, self._captured = spec, leaves, captured

    def forward(self, *tensors: torch.Tensor) -> tuple:
        given = iter(tensors)
        leaves = [next(given) if leaf is _TENSOR else leaf for leaf in self._call_leaves]
        args, kwargs = pytree.tree_unflatten(leaves, self._call_spec)
        out = self.m(*args, **kwargs)
        flat, spec = pytree.tree_flatten(out)
        template, results = [], []
        for i, leaf in enumerate(flat):
            if isinstance(leaf, torch.Tensor):
                template.append(("T", len(results)))
                results.append(leaf)
            elif isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                kind = {torch.SymInt: "int", torch.SymFloat: "float", torch.SymBool: "bool"}[type(leaf)]
                template.append(("S", len(results), kind))
                results.append(torch.scalar_tensor(leaf, dtype=torch.float64 if kind == "float" else torch.int64))
            elif leaf is None or type(leaf) in (int, float, bool, str):
                template.append(("C", leaf))
            else:
                raise TypeError(f"output leaf {i} is a {type(leaf).__name__}: the native forward returns tensors, "
                                f"int, float, bool, str and None, in tuples, lists and dicts")
        self._captured["spec"], self._captured["template"] = spec, template
        return tuple(results)


def _per_tensor(example: Any, shapes: Any, out: List[Any]) -> None:
    """``shapes`` (torch.export's ``dynamic_shapes`` for ``example``) as one spec per tensor of
    ``example``, in its flattening order."""
    if isinstance(example, torch.Tensor):
        out.append(shapes)
    elif isinstance(example, (tuple, list)):
        for i, item in enumerate(example):
            _per_tensor(item, None if shapes is None else shapes[i], out)
    elif isinstance(example, dict):
        for key in example:  # pytree flattens dicts in insertion order
            _per_tensor(example[key], None if shapes is None else shapes[key], out)


def _export_entry(module: torch.nn.Module, owned: _Owned, args: tuple, kwargs: Dict[str, Any], hint_shapes: Any,
                  training: bool) -> Dict[str, Any]:
    """Exports and lowers ``module`` for the call ``(args, kwargs)`` in ``training`` mode and
    registers the program; raises :class:`_lower.NotNative` (the module then as it was)."""
    name = type(module).__qualname__
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    tensors = [leaf.detach().to(owned.device) for leaf in flat if isinstance(leaf, torch.Tensor)]
    leaves = [_TENSOR if isinstance(leaf, torch.Tensor) else leaf for leaf in flat]
    if hint_shapes is not None:
        shapes: List[Any] = []
        _per_tensor(tuple(args), hint_shapes, shapes)
    else:
        shapes = [{0: torch.export.Dim.AUTO} if t.dim() > 0 else None for t in tensors]
    # The default dynamic dimensions are exported size-obliviously (torch.export's
    # backed_size_oblivious): their range starts at 0, so that a batch of 1 runs the program made
    # from a batch of 4, and a program made from a first batch of 1 is not fixed to that size.
    oblivious = hint_shapes is None
    captured: Dict[str, Any] = {}
    wrapper = _Call(module, spec, leaves, captured)
    was = module.training
    module.train(training)
    try:
        if oblivious:
            import torch.fx.experimental._config as fx_config

            with fx_config.patch(backed_size_oblivious=True):
                ep = _lower.export(wrapper, tuple(tensors), (tuple(shapes),))
        else:
            ep = _lower.export(wrapper, tuple(tensors), (tuple(shapes),))
        program, _ = _lower.lower(ep, wrapper, owned.params, owned.device,
                                  _lower.call_names(module, tuple(args), dict(kwargs)), name=name)
        registration = ops.new_native_module(name, owned.params)
        program.install(registration.handle(), training)
        registration.set_training(training)
    finally:
        module.train(was)
    owned.registrations.append(registration)
    return {"handle": registration.handle(), "out_spec": pytree.treespec_dumps(captured["spec"]),
            "out_leaves": captured["template"]}


def program_for(module_rref: rpc.RRef, key: Any, args: tuple, kwargs: Dict[str, Any], hint_shapes: Any,
                fullgraph: bool) -> Dict[str, Any]:
    """The entry of call key ``key`` (exported from ``(args, kwargs)`` the first time it is asked
    for; one export at a time on this worker): ``{"handle", "out_spec", "out_leaves"}``, or
    ``{"python": reason}`` when the call runs in Python (torch.export or the lowering refused it,
    or the module holds :data:`PROGRAM_CACHE_BOUND` programs already). With ``fullgraph`` a refusal
    raises ``RuntimeError`` instead (nothing is kept)."""
    module = module_rref.local_value()
    name = type(module).__qualname__
    with _LOCK:
        owned = _NATIVE.get(module)
        if owned is None:
            owned = _NATIVE[module] = _Owned(module)
        entry = owned.entries.get(key)
        if entry is not None and not (fullgraph and "python" in entry):
            return entry
        if len(owned.registrations) >= PROGRAM_CACHE_BOUND:
            reason = (f"{name} has {PROGRAM_CACHE_BOUND} programs already (the bound of a module's programs, one per "
                      f"call structure, dtypes, ranks, non-tensor values and mode)")
            if fullgraph:
                raise RuntimeError(f"{name} cannot run natively: {reason}")
            entry = {"python": reason}
        else:
            try:
                entry = _export_entry(module, owned, args, kwargs, hint_shapes, bool(key[-1]))
            except _lower.NotNative as error:
                if fullgraph:
                    raise RuntimeError(f"{name} cannot run natively: {error}") from None
                entry = {"python": str(error)}
        owned.entries[key] = entry
        return entry


def set_training(module_rref: rpc.RRef, training: bool) -> None:
    """``module.train(training)``: the mode of the Python forward; the native forwards' key
    holds the mode (a program of that mode is exported at its first call)."""
    module_rref.local_value().train(training)


def parameter_rrefs(module_rref: rpc.RRef, recurse: bool) -> List[rpc.RRef]:
    """An RRef to each of the module's parameters (the live tensors)."""
    return [rpc.RRef(p) for p in module_rref.local_value().parameters(recurse)]


def python_forward(module_rref: rpc.RRef, args: tuple, kwargs: Optional[Dict[str, Any]] = None) -> Any:
    """The module's forward in Python, as torch's RemoteModule runs it; torch's RPC records it in
    the caller's context."""
    return module_rref.local_value()(*args, **(kwargs or {}))


def info(module_rref: rpc.RRef) -> Dict[str, int]:
    """The counters of the module's native programs, summed (``forwards``, ``snapshots``), its
    ``programs`` and ``training`` (1 or 0); ``{}`` for a module that has no native program."""
    module = module_rref.local_value()
    with _LOCK:
        owned = _NATIVE.get(module)
        registrations = list(owned.registrations) if owned is not None else []
    if not registrations:
        return {}
    total = {"forwards": 0, "snapshots": 0}
    for registration in registrations:
        counters = dict(registration.info())
        for k in total:
            total[k] += counters[k]
    return dict(total, programs=len(registrations), training=int(module.training))
