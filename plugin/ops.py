"""The op library's ops and classes, one typed Python function each: the library's Python face.

Every op the library declares (``plugin/csrc/ops.cpp``, as ``torch.ops.gilfree_rpc.<name>``)
and its custom classes (``torch.classes.gilfree_rpc.StepLock``, ``NativeLocalOptimizer``, ``ForwardProgram``,
``NativeModule``) are named here and nowhere else in the package: the other modules call these
functions. Each function calls its op directly and does nothing more, so it behaves exactly as
the op does (same errors, no extra checks: the ops raise typed errors, which torch gives their
Python types; ``plugin/csrc/rpc/worker_error.h``); the friendlier entry points are
:mod:`plugin.autograd` and :mod:`plugin.optim`.

The functions are TorchScript-compatible (TorchScript is optional: nothing here needs it):
a scripted function that calls one compiles it too, and the compiled graph calls the op
itself (``gilfree_rpc::<name>``), without Python and without the GIL. The names
``torch.ops.gilfree_rpc.*`` keep working; calling them or these functions is the same.

``functional_optim``'s ops (``torch.ops.gilfree_optim``: the group steps and its kernels) are
its own library's, with their own Python face (``functional_optim/ops.py``); this library's C++
calls them through ``functional_optim/csrc/group_step_ops.h``.

Functions whose names start with an underscore wrap the engine's RPC handlers and
bookkeeping ops, and the distributed optimizer's; they are for the package's own modules
(:mod:`plugin.autograd`, :mod:`plugin.optim`). The handlers are what other workers call by
RPC: each has a native RPC function (``gilfree_rpc.<op>``, ``plugin/csrc/rpc/rpc_functions.h``)
that the library defines when it loads, called with :func:`plugin._rpc_functions.call`.
"""
import contextlib
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

__all__ = ["backward", "get_gradients", "gradients_for", "new_step_lock", "new_local_optimizer", "new_forward_program",
           "new_native_module"]


def backward(context_id: int, roots: List[Tensor], retain_graph: bool = False, mode: str = "smart") -> None:
    """The op ``gilfree_rpc::backward``: a distributed backward pass from ``roots``.

    What :func:`plugin.autograd.backward` calls after checking its arguments; see there for the
    algorithm. Returns when the pass has ended on every worker.

    Args:
        context_id (int): a distributed autograd context known on this worker.
        roots (List[Tensor]): scalar tensors (one element, any floating dtype, any device)
            that require grad and have a ``grad_fn``.
        retain_graph (bool): keep the graph's saved tensors on every worker. Default: ``False``.
        mode (str): ``"smart"`` (default) or ``"fast"``.

    Raises:
        RuntimeError: as :func:`plugin.autograd.backward`.
        ValueError: a ``mode`` that is neither ``"smart"`` nor ``"fast"`` (the one check of it).
    """
    torch.ops.gilfree_rpc.backward(context_id, roots, retain_graph, mode)


def _backward_and_step(context_id: int, roots: List[Tensor], retain_graph: bool, mode: str, steps: List[int]) -> None:
    """The op ``gilfree_rpc::backward`` with ``steps`` as its part-end hook arguments: a pass in
    which each owner named there applies its native local optimizer's step to the context's
    gradients as its part of the pass ends (``plugin/csrc/optim/part_end_hook.h``). ``steps``:
    ``[deadline_ms, worker_id, handle, worker_id, handle, ...]`` (deadline in ms since the Unix
    epoch, ``-1`` for none; each owner's RPC worker id and local optimizer handle). Read the
    outcomes with :func:`_step_outcomes`."""
    torch.ops.gilfree_rpc.backward(context_id, roots, retain_graph, mode, steps)


def _step_outcomes(context_id: int, workers: List[int]) -> List[int]:
    """The op ``gilfree_rpc::_step_outcomes``, on the worker that called
    :func:`_backward_and_step`, after the pass: each worker's outcome of its step, in the order of
    ``workers`` (RPC worker ids), a status of :func:`_step_statuses`' table (``applied``,
    ``late``, ``refused`` or ``not_reached``)."""
    return torch.ops.gilfree_rpc._step_outcomes(context_id, workers)


def get_gradients(context_id: int) -> Dict[Tensor, Tensor]:
    """The op ``gilfree_rpc::get_gradients``: this worker's gradients in a context.

    Args:
        context_id (int): a distributed autograd context known on this worker.

    Returns:
        Dict[Tensor, Tensor]: a new dict mapping each leaf tensor of this worker that received
        a gradient from the plugin's engine to that gradient (same shape, dtype and device as
        the leaf). Empty when no pass of the plugin's engine reached this worker.

    Raises:
        RuntimeError: the context id is unknown on this worker.
    """
    return torch.ops.gilfree_rpc.get_gradients(context_id)


def gradients_for(context_id: int, params: List[Tensor]) -> List[Optional[Tensor]]:
    """The op ``gilfree_rpc::gradients_for``: the gradient of each of ``params`` in a context.

    The plugin engine's gradients when one of its passes reached this worker in the
    context, otherwise those of torch's distributed autograd (a backward run by
    ``torch.distributed.autograd.backward``). What a local optimizer's step reads. Only
    retrieves the context: never creates one.

    Args:
        context_id (int): a distributed autograd context id.
        params (List[Tensor]): tensors of this worker (any shape, dtype and device), usually
            the leaf parameters of a model.

    Returns:
        List[Optional[Tensor]]: one entry per parameter, in order: its gradient (of the
        parameter's shape, dtype and device; sparse for sparse gradients), or ``None`` where
        it has none in the context. All ``None`` when the context is unknown on this worker
        (no backward pass of it reached this worker).

    Raises nothing.
    """
    return torch.ops.gilfree_rpc.gradients_for(context_id, params)


def new_step_lock(params: List[Tensor]) -> torch.ScriptObject:
    """A new ``torch.classes.gilfree_rpc.StepLock(params)``: the locks of a set of parameters,
    which TorchScript holds with ``with``.

    Every parameter (tensor object) has one lock in this process, shared by every StepLock
    over it and freed with the last of them. ``with lock: ...`` in TorchScript (from Python:
    ``with ops._holding(lock): ...``) takes the set's locks in ``__enter__``, in one
    process-wide order (so two StepLocks over overlapping sets serialize on the shared
    parameters and cannot deadlock), and releases them in ``__exit__``, also when the body
    raises; ``__exit__`` returns ``False`` (never swallows the exception). Waiting does not hold the GIL. Not reentrant: a thread that takes
    a parameter's lock twice deadlocks. ``lock.size()`` is the number of distinct parameters.

    Args:
        params (List[Tensor]): the parameters (defined tensors of any shape, dtype and
            device); a tensor listed twice is locked once.

    Returns:
        torch.ScriptObject: the lock, unlocked. Keep it in a module attribute to use it in
        scripted methods (``with self._lock:``).

    Raises:
        RuntimeError: an undefined tensor among ``params``.
    """
    return torch.classes.gilfree_rpc.StepLock(params)


@contextlib.contextmanager
def _holding(lock: torch.ScriptObject):
    """``with _holding(lock):`` holds a :func:`new_step_lock` lock from Python: its
    ScriptObject has ``__enter__`` and ``__exit__`` methods, but Python's ``with`` does not
    take a ScriptObject as a context manager. Releases the locks also when the body raises,
    and lets the exception through."""
    lock.__enter__()
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


# --- the distributed optimizer's bookkeeping (plugin.optim) -------------------------------


def _checked_versions(context_id: int, workers: List[int], accept_sparse: bool) -> List[int]:
    """The op ``gilfree_rpc::_checked_versions``, on the worker that called backward: if the
    latest backward pass of the plugin's engine in context ``context_id``, started here, ended
    everywhere, none is running now, and it reached every worker of ``workers`` (RPC worker
    ids) and found on each that every gradient a step reads there fits its parameter (dense or
    sparse COO, the parameter's shape, dtype and device; none sparse unless ``accept_sparse``),
    each worker's version of the context's gradients then, in the order of ``workers``; else
    ``[]``. A step over those owners then needs no validation round
    (``plugin/csrc/optim/part_end_hook.h``)."""
    return torch.ops.gilfree_rpc._checked_versions(context_id, workers, accept_sparse)


def _park_step(gradients: List[Optional[Tensor]], lease_ms: int) -> int:
    """The op ``gilfree_rpc::_park_step``: keeps validated gradients (references) between the
    two phases of an optimizer step, for at most ``lease_ms`` milliseconds; returns a token."""
    return torch.ops.gilfree_rpc._park_step(gradients, lease_ms)


def _take_step(token: int) -> List[Optional[Tensor]]:
    """The op ``gilfree_rpc::_take_step``: the gradients parked under ``token``, to apply them;
    raises (naming this worker) when the token is unknown or its lease expired."""
    return torch.ops.gilfree_rpc._take_step(token)


def _drop_step(token: int) -> bool:
    """The op ``gilfree_rpc::_drop_step``: forgets a parked step; whether it was still parked."""
    return torch.ops.gilfree_rpc._drop_step(token)


def _failure_kind(future: torch.futures.Future[Any]) -> str:
    """The op ``gilfree_rpc::_failure_kind``: why an RPC's future failed, read from the future
    (not its message): ``""`` (it succeeded), ``"timeout"`` (no answer within the RPC timeout),
    ``"unreachable"`` (the connection to the peer was refused, closed or broke), ``"error"``
    (the peer raised), or ``"pending"`` (not completed yet)."""
    return torch.ops.gilfree_rpc._failure_kind(future)


def _error_parts(text: str) -> Dict[str, str]:
    """The op ``gilfree_rpc::_error_parts``: the parts of the last error trailer in ``text``
    (``plugin/csrc/rpc/worker_error.h``: ``" [<origin> on worker '<name>' (id <n>), <where>]"`` at
    the end of a line): ``message`` (the text before it), ``origin``, ``type`` (the origin's
    ``"<Type> raised"``, else ``""``), ``worker``, ``worker_id``, ``where``, ``at_end`` (``"1"``:
    only blank space follows it), and ``node``, ``what`` (``text`` begins with ``"Error on Node
    <n>: "``) and ``context_id`` (a backward pass's) when present; ``{}`` when there is none.
    What :mod:`plugin._errors` decodes every native error with."""
    return torch.ops.gilfree_rpc._error_parts(text)


def _check_context(what: str, context_id: int, advice: str) -> None:
    """The op ``gilfree_rpc::_check_context``: raises ``RuntimeError`` unless ``context_id`` is a
    live distributed autograd context on this worker, with the library's one message for it
    (``"<what>: no distributed autograd context <id> on this worker (...): <advice> inside the
    `with dist_autograd.context()` block that created it"``; ``plugin/csrc/rpc/recorded_call.h``)."""
    torch.ops.gilfree_rpc._check_context(what, context_id, advice)


def _wall_clock_ms() -> int:
    """The op ``gilfree_rpc::_wall_clock_ms``: milliseconds since the Unix epoch (system clock)."""
    return torch.ops.gilfree_rpc._wall_clock_ms()


def _gradient_norms(context_id: int, params: List[Any], norm_type: float):
    """The op ``gilfree_rpc::_gradient_norms`` (RPC handler, on the owner of ``params``, RRefs
    to Tensors): the norm of each gradient of ``params`` in the context (a 1-D tensor of
    0-dim norms in the gradients' dtype, on the CPU; ``torch._foreach_norm`` per device and
    dtype, as torch's ``clip_grad_norm_``) and the positions in ``params`` of the parameters
    that have one. Raises ``RuntimeError`` for an RRef this worker does not own."""
    return torch.ops.gilfree_rpc._gradient_norms(context_id, params, norm_type)


def _scale_gradients(context_id: int, params: List[Any], coefficient: Tensor) -> None:
    """The op ``gilfree_rpc::_scale_gradients`` (RPC handler, on the owner of ``params``):
    multiplies every gradient of ``params`` in the context by ``coefficient`` (a 0-dim
    tensor), in place."""
    torch.ops.gilfree_rpc._scale_gradients(context_id, params, coefficient)


# --- the native local optimizers (plugin/csrc/optim/local_optimizer.h; plugin.optim.NativeLocalOptimizer)
# Each op reaches one by its handle; errors are typed (ValueError, RuntimeError), and those of the
# steps' ops carry the error trailer (plugin/csrc/rpc/worker_error.h); the steps return a status
# of the table _step_statuses gives. Schemas and contracts: ops.cpp.


def new_local_optimizer(name: str, groups: List[List[Tensor]], dense_error: Optional[str]) -> torch.ScriptObject:
    """A new ``torch.classes.gilfree_rpc.NativeLocalOptimizer``: the steps of a native local optimizer.

    Args:
        name (str): the optimizer's name in the op library (``"adam"``...).
        groups (List[List[Tensor]]): the parameters, group after group (any shape, a floating
            dtype, a device the optimizer's group step takes).
        dense_error (Optional[str]): the ``RuntimeError`` message for a dense gradient
            (SparseAdam's), or None.

    Returns:
        torch.ScriptObject: the object, without plans yet: ``configure(groups, names, values,
        tensor_names, tensor_values, sparse_errors, state)`` sets the plans of ``groups`` (the
        fields of ``functional_optim.configuration.StepPlan``, one list per group) and, when
        ``state`` is not None, replaces all state (flat index -> {key: Tensor}, the tensors
        themselves), under the parameters' locks; ``state()`` gives copies of the state;
        ``handle()`` its handle.

    Raises:
        ValueError: an empty parameter list.
    """
    return torch.classes.gilfree_rpc.NativeLocalOptimizer(name, groups, dense_error)


def _optimizer_step(handle: int, context_id: int, version: int, deadline_ms: int) -> int:
    """The op ``gilfree_rpc::_optimizer_step``: the context's gradients (version -1) or those the
    backward pass checked (``version``), applied before ``deadline_ms`` (-1: none)."""
    return torch.ops.gilfree_rpc._optimizer_step(handle, context_id, version, deadline_ms)


def _optimizer_prepare(handle: int, context_id: int, lease_ms: int) -> int:
    """The op ``gilfree_rpc::_optimizer_prepare``: phase 1 (check and park); the token."""
    return torch.ops.gilfree_rpc._optimizer_prepare(handle, context_id, lease_ms)


def _optimizer_commit(handle: int, token: int, deadline_ms: int) -> int:
    """The op ``gilfree_rpc::_optimizer_commit``: phase 2, before ``deadline_ms``."""
    return torch.ops.gilfree_rpc._optimizer_commit(handle, token, deadline_ms)


def _optimizer_drop(handle: int, token: int) -> bool:
    """The op ``gilfree_rpc::_optimizer_drop``: forgets a prepared step."""
    return torch.ops.gilfree_rpc._optimizer_drop(handle, token)


def _optimizer_step_gradients(handle: int, gradients: List[Optional[Tensor]]) -> None:
    """The op ``gilfree_rpc::_optimizer_step_gradients``: a step with these gradients."""
    torch.ops.gilfree_rpc._optimizer_step_gradients(handle, gradients)


def _step_statuses() -> Dict[str, int]:
    """The op ``gilfree_rpc::_step_statuses``: the table of an owner's outcomes of a step
    (``plugin/csrc/optim/step_status.h``), each status by name: ``applied``, ``changed`` (the
    gradients changed since the backward pass checked them), ``late`` (the owner reached its
    locks after the deadline), ``refused`` (its optimizer refused the gradients, in the
    backward pass), ``not_reached`` (no part of the pass ran there); nothing applied but for
    ``applied``."""
    return torch.ops.gilfree_rpc._step_statuses()


def _configure_auth_transport(key: str, crypto_library: str, listen_host: str) -> None:
    """The op ``gilfree_rpc::_configure_auth_transport`` (plugin.rpc): the authenticating
    transport's key, libcrypto and listen address; registers the transport the first time.
    With the first key it checks the transport's mirror of TensorPipe's ABI (a self-test over
    loopback in a child process) and raises ``RuntimeError`` when that fails."""
    torch.ops.gilfree_rpc._configure_auth_transport(key, crypto_library, listen_host)


def _swap_current_context(context_id: int) -> int:
    """The op ``gilfree_rpc::_swap_current_context``: sets this thread's current distributed
    autograd context (``-1``: none) and returns the previous one."""
    return torch.ops.gilfree_rpc._swap_current_context(context_id)


# --- the engine's RPC handlers (native RPC functions, plugin/csrc/rpc/rpc_functions.h) and bookkeeping --


def _receive_gradients(
    context_id: int,
    pass_id: int,
    autograd_message_id: int,
    grads: List[Tensor],
    retain_graph: bool,
    smart: bool,
    reached: List[int],
    hook_args: List[int],
) -> torch.futures.Future[List[int]]:
    """The op ``gilfree_rpc::_receive_gradients`` (RPC handler): gradients for this worker's
    send function ``autograd_message_id`` in pass ``pass_id``. The future completes when this
    worker may answer (see ``docs/engine.md``, "first contact"), with the part-end answers of
    the workers this one reached first (``[worker_id, word0, word1, ...]``,
    ``plugin/csrc/engine/part_end.h``) for the pass's first message here, else with an empty
    list. ``hook_args``: the arguments of their part-end hook (see :func:`_backward_and_step`)."""
    return torch.ops.gilfree_rpc._receive_gradients(
        context_id, pass_id, autograd_message_id, grads, retain_graph, smart, reached, hook_args
    )


def _reachability(context_id: int) -> List[int]:
    """The op ``gilfree_rpc::_reachability`` (RPC handler, smart mode): this worker's
    reachability table, flattened as ``[send_id, n, recv_id_1 .. recv_id_n, ...]``."""
    return torch.ops.gilfree_rpc._reachability(context_id)


def _abort_pass(context_id: int, pass_id: int) -> str:
    """The op ``gilfree_rpc::_abort_pass`` (RPC handler): drops a failed pass on this worker;
    returns what this worker's part of it was still waiting for ("" if it was not running
    here). With ids -1 it is the failed-worker watch's ping (docs/failures.md)."""
    return torch.ops.gilfree_rpc._abort_pass(context_id, pass_id)


def _release_context(context_id: int) -> None:
    """The op ``gilfree_rpc::_release_context``: forgets this worker's engine state for a context."""
    torch.ops.gilfree_rpc._release_context(context_id)


def _debug_info() -> Dict[str, int]:
    """The op ``gilfree_rpc::_debug_info``: this worker's counters, every room's
    (:func:`plugin.debug_info` lists them)."""
    return torch.ops.gilfree_rpc._debug_info()


# --- embedding-bag lookups served by RPC (plugin/csrc/embedding/remote_lookup.h; plugin/embedding.py) --


def _share_table(weight: Tensor, mode: int) -> int:
    """The op ``gilfree_rpc::_share_table``: shares a 2-D table for lookups with the bag mode
    ``mode`` (0 sum, 1 mean); returns its handle."""
    return torch.ops.gilfree_rpc._share_table(weight, mode)


def _unshare_table(handle: int) -> bool:
    """The op ``gilfree_rpc::_unshare_table``: forgets a table's handle; whether it was shared."""
    return torch.ops.gilfree_rpc._unshare_table(handle)


def _lookup_bags(context_id: int, handles: List[int], indices: List[Tensor], offsets: List[Tensor]) -> Tuple[Tensor, int]:
    """The op ``gilfree_rpc::_lookup_bags`` (RPC handler): the bags of tables ``handles`` side by
    side and, when recorded in context ``context_id``, the send function's autograd_message_id
    (-1 otherwise)."""
    return torch.ops.gilfree_rpc._lookup_bags(context_id, handles, indices, offsets)


def _check_lookup(prefix: str, inputs: List[Tensor], offsets: List[Tensor]) -> None:
    """The op ``gilfree_rpc::_check_lookup``: on the caller, ``_lookup_bags``' checks that need no
    table (every message after ``prefix``; the rows named ``inputs``), raised as their type."""
    torch.ops.gilfree_rpc._check_lookup(prefix, inputs, offsets)


# --- native RPC calls recorded in a distributed autograd context (plugin/csrc/rpc/recorded_call.h) --


def _begin_call(what: str, context_id: int, callee: int, requires_grad: List[bool]) -> Tuple[int, int]:
    """The op ``gilfree_rpc::_begin_call``, on the caller before it sends a native RPC call to worker
    ``callee`` (an RPC worker id): the context to record the call in (``context_id``, or with -1
    this thread's current context when grad mode is on) and, when some of the request's tensors
    require grad (``requires_grad``), a new autograd_message_id for the request; ``(-1, -1)``
    when there is nothing to record. The callee becomes a worker the context knows (its release
    reaches the callee). Raises ``RuntimeError`` (naming ``what``) when the context is not live
    on this worker."""
    return torch.ops.gilfree_rpc._begin_call(what, context_id, callee, requires_grad)


def _record_call(what: str, context_id: int, autograd_message_id: int, sent: List[Tensor], answer_id: int, from_worker: int,
                 answer: List[Tensor], answer_requires_grad: List[bool]) -> List[Tensor]:
    """The op ``gilfree_rpc::_record_call``, on the caller when a native RPC call's answer arrived
    from worker ``from_worker``: records the send function of request ``autograd_message_id`` over ``sent``
    (the request's tensors that require grad, in order; none when -1) and the recv function of
    the answer ``answer_id`` over the tensors of ``answer`` marked in ``answer_requires_grad``,
    which then require grad (nothing when ``answer_id`` is -1); returns ``answer``, now part of
    the context's graph. Raises ``RuntimeError`` (naming ``what``), recording nothing, when the
    context was released here before the answer arrived (the callee is told to release its
    side) or the answer does not fit its marks."""
    return torch.ops.gilfree_rpc._record_call(what, context_id, autograd_message_id, sent, answer_id, from_worker, answer,
                                              answer_requires_grad)


# --- remote modules (plugin/csrc/nn/remote_module.h; plugin.nn) -----------------------------------


def new_forward_program(module: str, num_slots: int, device: torch.device) -> torch.ScriptObject:
    """A new, empty ``torch.classes.gilfree_rpc.ForwardProgram`` (``plugin/csrc/nn/program.h``) for a
    module of class ``module``, with ``num_slots`` value slots, run on ``device``; built with its
    methods ``bind_parameter``, ``bind_tensor``, ``add_symbol``, ``add_input``, ``add_call``,
    ``add_list_item``, ``add_int_op`` and ``set_outputs`` (``plugin/nn/_lower.py``), and given to a
    registered module with ``install(handle, training)``.

    Args:
        module (str): the module's class name, for messages.
        num_slots (int): the number of value slots its instructions use, 0 <= num_slots < 2**24.
        device (torch.device): where its operators run (the module's device: CPU or a CUDA device).

    Returns:
        torch.ScriptObject: the program, without instructions.

    Raises:
        RuntimeError: ``num_slots`` out of range.
    """
    return torch.classes.gilfree_rpc.ForwardProgram(module, num_slots, device)


def new_native_module(name: str, params: List[Tensor]) -> torch.ScriptObject:
    """A new ``torch.classes.gilfree_rpc.NativeModule`` (``plugin/csrc/nn/remote_module.h``): a module
    of class ``name`` registered with its parameters, reached by ``handle()`` (by the forward
    programs' ``install`` and by ``_remote_forward``) as long as the object lives; ``set_training(bool)``
    switches the program its forwards run, ``info()`` gives its counters (``forwards``,
    ``snapshots``, ``training``).

    Args:
        name (str): the module's class name, for messages.
        params (List[Tensor]): the module's parameters in ``parameters()`` order (any shape,
            dtype and device; the live tensors, which its forwards read through snapshots).

    Returns:
        torch.ScriptObject: the registered module.

    Raises:
        RuntimeError: an undefined tensor among ``params``.
    """
    return torch.classes.gilfree_rpc.NativeModule(name, params)


def _nn_program_tables() -> Dict[str, Dict[str, int]]:
    """The op ``gilfree_rpc::_nn_program_tables``: the tables of a ``ForwardProgram``'s encoding,
    defined in C++ only (``plugin/csrc/nn/program_encoding.h``, ``plugin/csrc/python_names.h``),
    each ``{name: value}``: ``codes`` (the argument codes: ``none``, ``int``, ``float``, ``bool``,
    ``str``, ``slot``, ``list``, ``dtype``, ``device``, ``layout``, ``memory_format``,
    ``default``), ``int_ops`` (the integer operations on sizes, by their names in Python's
    ``operator`` module), ``dtypes``, ``layouts`` and ``memory_formats`` (every one the decoder
    reads, by the name Python prints: ``"torch.float32"``, a dtype also by its legacy name, with
    c10's enum value). ``plugin.nn._lower`` reads them once, at import."""
    return torch.ops.gilfree_rpc._nn_program_tables()


def _remote_forward(handle: int, context_id: int, autograd_message_id: int, inputs: List[Tensor],
                requires_grad: List[bool], device_map_set: bool) -> Tuple[List[Tensor], List[bool], int]:
    """The op ``gilfree_rpc::_remote_forward`` (RPC handler): module ``handle``'s forward on ``inputs``;
    the outputs, which of them require grad, and their send function's autograd_message_id (-1:
    none recorded)."""
    return torch.ops.gilfree_rpc._remote_forward(handle, context_id, autograd_message_id, inputs, requires_grad,
                                             device_map_set)
