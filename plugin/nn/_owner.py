"""What a remote module's owner runs in Python: building the module, exporting and registering
it, switching its mode, the RRefs of its parameters, and the pickled forward of a module that
cannot run natively (``fallback="python"``). None of it is on the native forward's path, which
runs in C++ (``plugin/csrc/nn/remote_module.h``).

Each function is called by RPC from :class:`plugin.nn.RemoteModule` (by reference: the owner
imports this module) with the module's RRef, whose value is the ``nn.Module`` on this worker.
"""
import threading
import weakref
from typing import Any, Dict, List, Optional

import torch
import torch.distributed.rpc as rpc

from .. import ops
from . import _lower

__all__ = ["create", "prepare", "set_training", "parameter_rrefs", "python_forward", "info"]


class _Native:
    """The native side of a module on its owner: its registration (a NativeModule, which lives as
    long as this object, so the handle goes with the module), and what exporting it again (the
    other mode's program) needs."""

    def __init__(self, registration: torch.ScriptObject, example_inputs: tuple, dynamic_shapes: Any,
                 params: List[torch.Tensor], device: torch.device, names: List[str]):
        self.registration, self.handle = registration, registration.handle()
        self.example_inputs, self.dynamic_shapes = example_inputs, dynamic_shapes
        self.params, self.device, self.names = params, device, names
        self.modes = set()
        self.info: Dict[str, Any] = {}


# module -> its native side (a module that runs natively); the entry, and with it the module's
# registration, goes with the module (no code runs then: a finalizer that called an op could run
# while torch.export traces another module on the same thread, and be traced into its graph)
_NATIVE: "weakref.WeakKeyDictionary[torch.nn.Module, _Native]" = weakref.WeakKeyDictionary()
# guards _NATIVE and serializes the exports (torch.export is not thread-safe)
_LOCK = threading.RLock()


def create(module_cls: Any, args: tuple, kwargs: Dict[str, Any], device: str) -> torch.nn.Module:
    """``module_cls(*args, **kwargs)`` moved to ``device``: the value of the RemoteModule's RRef."""
    module = module_cls(*args, **kwargs)
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module_cls must build a torch.nn.Module, got {type(module).__name__}")
    return module.to(torch.device(device))


def _install(module: torch.nn.Module, native: _Native, training: bool) -> Any:
    """Exports ``module`` in ``training`` mode, lowers it and gives the program to its registration
    (once per mode); returns the output's tree spec. The module is left in the mode it was in when
    this fails (:class:`_lower.NotNative`)."""
    was = module.training
    module.train(training)
    try:
        example = tuple(_lower.pytree.tree_map(
            lambda t: t.to(native.device) if isinstance(t, torch.Tensor) else t, tuple(native.example_inputs)))
        ep = _lower.export(module, example, native.dynamic_shapes)
        program, out_spec = _lower.lower(ep, module, native.params, native.device, native.names)
    except BaseException:
        module.train(was)
        raise
    program.install(native.handle, training)
    native.modes.add(training)
    return out_spec


def prepare(module_rref: rpc.RRef, example_inputs: tuple, dynamic_shapes: Any, fallback: Optional[str]) -> Dict[str, Any]:
    """Exports the module in its current mode, lowers and registers it: ``{"native": True,
    "handle", "in_spec", "out_spec", "name", "training"}`` (tree specs as ``treespec_dumps`` writes
    them); a module registered already answers with its registration. When it cannot run
    natively: with ``fallback == "python"``, ``{"native": False, "reason", "name", "training"}``;
    else raises ``RuntimeError`` giving the reason (export's own message, or the node and
    operator). One export at a time on this worker (torch.export is not thread-safe)."""
    module = module_rref.local_value()
    name = type(module).__qualname__
    with _LOCK:
        native = _NATIVE.get(module)
        if native is not None:
            return dict(native.info, training=module.training)
        params = list(module.parameters())
        device = params[0].device if params else next((b.device for b in module.buffers()), torch.device("cpu"))
        dynamic_shapes = _lower.default_dynamic_shapes(example_inputs) if dynamic_shapes is None else dynamic_shapes
        native = _Native(ops.new_native_module(name, params), tuple(example_inputs), dynamic_shapes, params, device,
                         _lower.input_names(module, tuple(example_inputs)))
        try:
            out_spec = _install(module, native, module.training)
        except _lower.NotNative as error:
            if fallback == "python":
                return {"native": False, "reason": str(error), "name": name, "training": module.training}
            raise RuntimeError(f"{name} cannot run natively: {error}") from None
        native.registration.set_training(module.training)
        _NATIVE[module] = native
        in_spec = _lower.pytree.tree_flatten((tuple(example_inputs), {}))[1]
        native.info = {"native": True, "handle": native.handle, "in_spec": _lower.pytree.treespec_dumps(in_spec),
                       "out_spec": _lower.pytree.treespec_dumps(out_spec), "name": name}
        return dict(native.info, training=module.training)


def set_training(module_rref: rpc.RRef, training: bool) -> None:
    """``module.train(training)``; for a native module, the program of that mode (exported the
    first time) runs the next forwards. When that export fails, nothing changes."""
    module = module_rref.local_value()
    with _LOCK:
        native = _NATIVE.get(module)
        if native is None:
            module.train(training)
            return
        if training not in native.modes:
            try:
                _install(module, native, training)
            except _lower.NotNative as error:
                raise RuntimeError(f"{type(module).__qualname__} cannot run natively in "
                                   f"{'train' if training else 'eval'} mode: {error}") from None
        module.train(training)
        native.registration.set_training(training)


def parameter_rrefs(module_rref: rpc.RRef, recurse: bool) -> List[rpc.RRef]:
    """An RRef to each of the module's parameters (the live tensors)."""
    return [rpc.RRef(p) for p in module_rref.local_value().parameters(recurse)]


def python_forward(module_rref: rpc.RRef, *args: Any) -> Any:
    """The module's forward in Python (``fallback="python"``), as torch's RemoteModule runs it;
    torch's RPC records it in the caller's context."""
    return module_rref.local_value()(*args)


def info(module_rref: rpc.RRef) -> Dict[str, int]:
    """The native module's counters (``forwards``, ``snapshots``, ``training``); ``{}`` for a module
    that runs in Python."""
    with _LOCK:
        native = _NATIVE.get(module_rref.local_value())
    return dict(native.registration.info()) if native is not None else {}
