"""Distributed backward passes run by the plugin's own engine (``torch.ops.gilfree_rpc``).

The forward pass is recorded by torch's RPC layer as usual: inside
``torch.distributed.autograd.context()`` (or :class:`context`), every RPC that carries
tensors requiring grad attaches a *send function* to the autograd graph of the worker that
sent them and a *recv function* to the graph of the worker that received them; each pair
shares an ``autograd_message_id``. :func:`backward` then runs the backward pass across
workers with the plugin's C++ engine, which executes each worker's part without the GIL
and sends gradients from each recv function to its send function's worker by RPC.

Both functions can be called from ``torch.jit.script`` code.
"""
from typing import Dict, List, Optional

import torch
import torch.distributed.autograd as _dist_autograd
from torch import Tensor

from . import _errors, ops

__all__ = ["backward", "get_gradients", "context", "BackwardError"]


def backward(context_id: int, roots: List[Tensor], retain_graph: bool = False, mode: str = "smart") -> None:
    """Runs a distributed backward pass from ``roots`` and waits until it has ended on every worker.

    Leaf gradients are accumulated per context on the worker that holds each leaf (read
    them with :func:`get_gradients` there); ``.grad`` is not touched. Several passes in one
    context (with ``retain_graph=True``) add up. Tensor hooks and hooks on leaves run as in
    ``torch.distributed.autograd``.

    Args:
        context_id (int): id of the distributed autograd context the forward pass ran in
            (from ``with torch.distributed.autograd.context() as context_id``).
        roots (List[Tensor]): scalar tensors (one element, any floating dtype and device)
            that require grad and have a ``grad_fn``; each gets the gradient 1.
        retain_graph (bool): keep the saved tensors of the graph on every worker, so that
            backward can run through it again. Default: ``False`` (freed as they are used).
        mode (str): ``"smart"`` (default) first finds which send functions the pass reaches,
            across workers, and runs only what reaches the roots: forward RPCs whose
            outputs are unused are skipped, as local autograd skips unused branches.
            ``"fast"`` assumes every send function of the context gets a gradient (torch's
            FAST mode): one RPC round trip less per pass, but a pass with an unused RPC
            output fails when the RPC timeout expires.

    Raises:
        TypeError: ``context_id`` is not an ``int``, ``roots`` is not a list or tuple of
            Tensors, ``retain_graph`` is not a ``bool`` or ``mode`` not a ``str``: torch's
            pybind message ``backward(): incompatible function arguments``, then which argument
            and its type (torch's ``torch.distributed.autograd.backward`` raises that
            TypeError for the same calls).
        ValueError: ``mode`` is neither ``"smart"`` nor ``"fast"`` (under TorchScript a
            ``RuntimeError`` with the same message, as TorchScript hands on an op's errors).
        BackwardError: (a ``RuntimeError``) an error on any worker once the pass has started,
            with torch's contract: the message starts with ``Error on Node <n>: `` (``n``: the
            id of the worker where it happened) followed by the original message, then says
            in brackets what raised it, where::

                Error on Node 2: Simulate error on backward pass [Exception raised by a
                Python autograd.Function while running SimulateBackwardErrorBackward on
                worker 'worker2' (id 2), in the backward pass of context 5]

            The same for a Python hook or a custom ``autograd.Function``'s backward (whatever
            type it raised; ``error_type`` names it), a C++ error, a gradient message that
            could not be sent (the transport's own text after the prefix) and a pass that
            did not end within the RPC timeout (raised within 1.1 times the timeout, naming
            the workers that did not answer and the send functions, by
            ``autograd_message_id``, still waiting for gradients; see ``docs/failures.md``).
            The pass is then aborted on every worker and the context can run backward again.
        RuntimeError: before the pass starts: the context id is unknown on this worker (in
            the same form as above); ``roots`` is empty or holds a tensor that is not a
            scalar, does not require grad or has no ``grad_fn`` (torch's messages); another
            backward pass of the same context is running on this worker. Under TorchScript,
            errors of the pass are ``RuntimeError`` too, with the same message.

    Algorithm: the FAST mode of torch's distributed autograd design
    (docs/source/rpc/distributed_autograd.rst) and this project's SMART mode; see the
    engine guide in ``docs/engine.md``.
    """
    if not torch.jit.is_scripting():  # TorchScript checks the types itself
        _check_backward_arguments(context_id, roots, retain_graph, mode)
    # (the op checks the mode: ValueError, before anything runs)
    if torch.jit.is_scripting():
        ops.backward(context_id, roots, retain_graph, mode)
    else:
        _backward_raising_backward_errors(context_id, list(roots), retain_graph, mode)


class BackwardError(RuntimeError):
    """The error of a backward pass that failed on some worker (see :func:`backward`).

    A ``RuntimeError``, as torch's distributed engine raises, with torch's message
    ``Error on Node <n>: <original message>`` followed by ``[<what raised it> on worker
    '<name>' (id <n>), in the backward pass of context <id>]``.

    The engine builds it (:func:`backward`); the arguments are its attributes, ``message`` the
    whole message.

    Args:
        message (str): the whole message, as above.
        worker (str): see the attributes.
        worker_id (int): see the attributes.
        context_id (int): see the attributes.
        error_type (Optional[str]): see the attributes.
        original_message (str): see the attributes.

    Attributes:
        worker (str): name of the worker where the error happened.
        worker_id (int): its id (the ``n`` of ``Error on Node <n>``).
        context_id (int): the distributed autograd context of the pass.
        error_type (Optional[str]): the name of the original exception's type (``"ValueError"``,
            ``"RuntimeError"`` for torch's C++ errors, a hook's own class name, ...); None when
            the engine itself failed the pass (a timeout, a message that could not be sent, an
            abort).
        original_message (str): the original exception's message, as it follows the prefix.

    ``__cause__`` is the original exception when the process that called backward raised it
    (a hook or ``autograd.Function`` run on this worker); None when it was raised on another
    worker, whose process keeps it (its type's name and message are here). Pickles with its
    attributes.

    Raises nothing.
    """

    def __init__(self, message: str, worker: str, worker_id: int, context_id: int,
                 error_type: Optional[str], original_message: str):
        super().__init__(message)
        self.worker = worker
        self.worker_id = worker_id
        self.context_id = context_id
        self.error_type = error_type
        self.original_message = original_message

    def __reduce__(self):
        return (type(self), (str(self), self.worker, self.worker_id, self.context_id, self.error_type,
                             self.original_message))


@torch.jit.unused
def _backward_raising_backward_errors(context_id: int, roots: List[Tensor], retain_graph: bool, mode: str,
                                      steps: Optional[List[int]] = None) -> None:
    # ``steps``: DistributedOptimizer.backward_and_step's (ops._backward_and_step)
    try:
        if steps:
            ops._backward_and_step(context_id, roots, retain_graph, mode, steps)
        else:
            ops.backward(context_id, roots, retain_graph, mode)
    except RuntimeError as error:
        parts = _errors.parse_pass_error(str(error))
        original = _errors.take_original_error(context_id)
        if parts is None:
            raise
        rebuilt = BackwardError(str(error), parts["worker"], parts["worker_id"], parts["context_id"],
                                parts["error_type"], parts["what"])
        # the original exception, when this process raised it in this pass (its type and
        # message are those the engine reported)
        if original is not None and (type(original).__name__ != parts["error_type"]
                                     or str(original).rstrip() != parts["what"]):
            original = None
        raise rebuilt from original


def get_gradients(context_id: int) -> Dict[Tensor, Tensor]:
    """The gradients the plugin's engine accumulated on this worker in a context (or, where no
    pass of the plugin's engine reached this worker, those of torch's engine: the gradients
    a step reads).

    Args:
        context_id (int): a distributed autograd context known on this worker.

    Returns:
        Dict[Tensor, Tensor]: a new dict mapping each leaf tensor of this worker that
        received a gradient to that gradient (same shape, dtype and device as the leaf; a
        sparse tensor for sparse gradients such as ``nn.Embedding(sparse=True)``'s). Empty
        when no backward pass reached this worker. The gradient tensors are the engine's
        own, stored without a copy where torch's engine stores them without one; a later
        pass in the context adds its gradients into them in place, as torch does (on the
        worker that called backward when backward returns, on the others when the next
        pass starts there). The engine also puts them into torch's own store of the
        context's gradients, so ``torch.distributed.autograd.get_gradients`` and torch's
        ``DistributedOptimizer`` see them.

    Raises:
        TypeError: ``context_id`` is not an ``int`` (``get_gradients(): incompatible function
            arguments: ...``, as torch's).
        RuntimeError: the context id is unknown on this worker, or passes of both engines
            (torch's and the plugin's) ran in the context here: their gradients do not add up.
    """
    if not torch.jit.is_scripting():
        _check_context_id("get_gradients", context_id)
    return ops.get_gradients(context_id)


# torch's pybind functions raise TypeError("<name>(): incompatible function arguments. ...")
# for arguments of the wrong type; so do these, naming the argument after those words.
_INCOMPATIBLE = "incompatible function arguments"


@torch.jit.ignore
def _check_context_id(function: str, context_id) -> None:
    if isinstance(context_id, bool) or not isinstance(context_id, int):
        raise TypeError(f"{function}(): {_INCOMPATIBLE}: context_id must be an int, got {type(context_id).__name__}")


@torch.jit.ignore
def _check_backward_arguments(context_id, roots, retain_graph, mode, what: str = "backward") -> None:
    """The argument checks of ``what`` (``backward``, ``backward_and_step``), torch's messages."""
    _check_context_id(what, context_id)
    if not isinstance(roots, (list, tuple)):
        raise TypeError(f"{what}(): {_INCOMPATIBLE}: roots must be a list of Tensors, got {type(roots).__name__}")
    for i, root in enumerate(roots):
        if not isinstance(root, Tensor):
            raise TypeError(f"{what}(): {_INCOMPATIBLE}: roots[{i}] must be a Tensor, got {type(root).__name__}")
    if not isinstance(retain_graph, bool):
        raise TypeError(
            f"{what}(): {_INCOMPATIBLE}: retain_graph must be a bool, got {type(retain_graph).__name__}")
    if not isinstance(mode, str):
        raise TypeError(f"{what}(): {_INCOMPATIBLE}: mode must be a str, got {type(mode).__name__}")


class context:
    """``torch.distributed.autograd.context`` that also frees the engine's state for it on exit.

    Use it like torch's::

        with plugin.autograd.context() as context_id:
            loss = model(x).sum()
            plugin.autograd.backward(context_id, [loss])

    On exit torch releases the context on every worker it reached; this worker's engine
    state (its accumulated gradients) is dropped at once, and the other workers' at their
    engine's next call. The context id is an ``int``.

    Raises:
        RuntimeError: on entry, when distributed autograd is not initialized (start RPC first,
            e.g. with :func:`plugin.rpc.init_rpc`) or this thread is inside a context already
            (torch's messages).
    """

    def __enter__(self) -> int:
        self._torch_context = _dist_autograd.context()
        self._context_id = self._torch_context.__enter__()
        return self._context_id

    def __exit__(self, exc_type, exc_value, traceback):
        try:
            return self._torch_context.__exit__(exc_type, exc_value, traceback)
        finally:
            ops._release_context(self._context_id)


