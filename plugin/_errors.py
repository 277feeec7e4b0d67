"""Short error messages for failures that come back over RPC, and the parts of the
engine's errors of a backward pass: the Python side of the library's one error contract
(``plugin/csrc/rpc/worker_error.h``).

An exception raised by a function run by RPC reaches the caller with the callee's
traceback folded into its message (and, for TorchScript, the interpreter's). The line
that says what went wrong is the last ``SomeError: message`` line; this module finds it
so the caller's message can lead with it, naming the worker, while the full text stays
available as the exception's ``__cause__``.

A native op's error (a typed c10 error on the callee) comes back as the text of a
``RuntimeError`` (the callee's TorchScript interpreter writes every error so) that ends with
the library's one trailer, ``" [<Type> raised on worker '<name>' (id <n>), in gilfree_rpc::<op>]"``,
read by the op ``_error_parts`` (the trailer's one parser, in C++); :func:`decode_native` turns it
back into ``"<Type>: <message>"``, torch's message first, and :func:`raise_on_worker` raises that
type. A backward pass's errors end with the same trailer (:func:`parse_pass_error`).
"""
import builtins
import re
import threading
from collections import OrderedDict
from typing import Any, Callable, Optional

import torch

from . import ops

_ERROR_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt)\b: ")


_TIMEOUT = re.compile(r"RPC ran for more than set timeout \((\d+) ms\)")
_TRANSPORT = "(this error originated at tensorpipe"


def remote_error_summary(error: BaseException) -> str:
    """The ``Type: message`` part of an exception that came back over RPC, up to the end
    of its paragraph; ``str(error)`` when there is no such line. torch's RPC timeout and
    TensorPipe's transport errors (which name no worker) are said in words."""
    text = str(error)
    timeout = _TIMEOUT.search(text)
    if timeout:
        return f"no answer within the RPC timeout ({timeout.group(1)} ms): the worker is frozen, overloaded or unreachable"
    if _TRANSPORT in text:
        return f"the connection to it was lost (the worker died or closed it): {text.strip().splitlines()[0]}"
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if _ERROR_LINE.match(lines[i]):
            paragraph = []
            for line in lines[i:]:
                if not line.strip() or line.startswith("At:"):
                    break
                paragraph.append(line.strip())
            summary = " ".join(paragraph)
            # TorchScript names Python's exceptions "builtins.RuntimeError"
            summary = summary[len("builtins."):] if summary.startswith("builtins.") else summary
            decoded = decode_native(summary)
            if decoded is not None:
                return decoded
            return summary
    return str(error).strip()


def decode_native(text: str) -> Optional[str]:
    """``"<Type>: <message>"`` for the text of a native op's error that ends with the error
    trailer naming its type (``plugin/csrc/rpc/worker_error.h``; ``text``: the error's
    ``"Type: message"`` line), the trailer removed (the caller's message names the worker) and
    the line's ``"Type: "`` replaced by the trailer's type; None for any other text (a backward
    pass's errors, which keep their trailer)."""
    parts = ops._error_parts(text)
    if not parts or not parts["type"] or parts["at_end"] != "1" or "context_id" in parts:
        return None
    # the line's own "<Type>: ": the interpreter's RuntimeError, or the type itself (a Python
    # function on the callee let the op's error through: torch prints its traceback)
    message = parts["message"]
    for shown in ("RuntimeError: ", parts["type"] + ": "):
        if message.startswith(shown):
            message = message[len(shown):]
            break
    return f"{parts['type']}: {message.rstrip()}"


def raise_on_worker(worker: str, what: str, error: BaseException, prefix: str, detail: str = "",
                    as_type: Optional[type] = None):
    """Raises ``error``'s type (RuntimeError if it cannot be rebuilt), or ``as_type`` when
    given, with the message ``"{prefix}: {what} failed on owner {worker!r}: {summary}{detail}"``,
    chained to ``error``."""
    summary = remote_error_summary(error)
    message = f"{prefix}: {what} failed on owner {worker!r}: {summary}{detail}"
    if as_type is not None:
        raise as_type(message) from error
    cls = type(error)
    if cls is RuntimeError:
        # TorchScript hands every error back as a RuntimeError; the summary names the type
        # the owner raised ("ValueError: ..."): raise that one when it is a built-in exception.
        named = getattr(builtins, summary.split(":", 1)[0], None)
        if isinstance(named, type) and issubclass(named, Exception):
            cls = named
    try:
        rebuilt = cls(message)
    except Exception:  # noqa: BLE001 (an exception type with another constructor)
        rebuilt = RuntimeError(message)
    raise rebuilt from error


def relay(answer: torch.futures.Future, worker: str, what: str, prefix: str,
          finish: Callable[[Any], Any]) -> torch.futures.Future:
    """The caller's future of an RPC's ``answer``: completes with ``finish(answer's value)``, or
    with the error :func:`raise_on_worker` raises for ``answer``'s error (naming ``worker``,
    ``what`` and ``prefix``), or with the error ``finish`` raised.

    Args:
        answer (torch.futures.Future): the RPC's own future (``rpc.rpc_async``'s, or
            ``plugin._rpc_functions.call``'s).
        worker (str): the callee's worker name.
        what (str): what the call does, for the message (``"the forward of Net"``).
        prefix (str): the caller's API, the message's start (``"RemoteModule.forward"``).
        finish (Callable[[Any], Any]): the answer's value -> the future's result, run in
            ``answer``'s callback (on the RPC thread that completed it).

    Returns:
        torch.futures.Future: a future of its own, not ``answer.then(...)``: an error raised in
        a ``then`` callback would come out of ``wait()`` as a RuntimeError wrapped in torch's
        text about the callback; here it keeps its type and message.
    """
    done = torch.futures.Future()

    def arrived(future: torch.futures.Future) -> None:
        try:
            try:
                value = future.value()
            except Exception as error:  # noqa: BLE001 (raised again, naming the owner)
                raise_on_worker(worker, what, error, prefix)
            done.set_result(finish(value))
        except Exception as error:  # noqa: BLE001 (handed to the future)
            done.set_exception(error)

    answer.add_done_callback(arrived)
    return done


# --- errors of a backward pass (plugin.autograd.backward) ------------------------------

# context id -> the Python exception a hook or autograd.Function raised on this worker in
# the latest failed pass of that context (python_errors.cpp hands them over); at most
# _KEPT_ORIGINALS, the oldest dropped first.
_ORIGINALS: "OrderedDict[int, BaseException]" = OrderedDict()
_KEPT_ORIGINALS = 16
_ORIGINALS_LOCK = threading.Lock()


def _keep_original_error(context_id: int, error: BaseException) -> None:
    """Called by the engine (python_errors.cpp, with the GIL) on the worker that called
    backward, when Python code it ran there raised ``error`` in a pass of ``context_id``."""
    with _ORIGINALS_LOCK:
        _ORIGINALS.pop(context_id, None)
        _ORIGINALS[context_id] = error
        while len(_ORIGINALS) > _KEPT_ORIGINALS:
            _ORIGINALS.popitem(last=False)


def take_original_error(context_id: int) -> Optional[BaseException]:
    """The exception kept for ``context_id`` (see _keep_original_error), removed; None if none."""
    with _ORIGINALS_LOCK:
        return _ORIGINALS.pop(context_id, None)


def parse_pass_error(message: str) -> Optional[dict]:
    """The parts of the engine's message for an error in a backward pass: ``node`` and
    ``worker_id`` (int), ``worker`` (name), ``context_id`` (int), ``what`` (the original
    message), ``origin`` (what raised it, or None) and ``error_type`` (the original exception
    type's name, or None for the engine's own errors and transport failures). None when
    ``message`` is not of that form."""
    # "Error on Node <n>: <what> [<origin> on worker '<name>' (id <n>), in the backward pass of
    # context <id>]" (worker_error.h, passError), read by the trailer's one parser
    parts = ops._error_parts(message)
    if not parts or parts["at_end"] != "1" or "context_id" not in parts or "node" not in parts:
        return None
    return {
        "node": int(parts["node"]),
        "what": parts["what"],
        "origin": parts["origin"] or None,
        "worker": parts["worker"],
        "worker_id": int(parts["worker_id"]),
        "context_id": int(parts["context_id"]),
        "error_type": parts["type"] or None,
    }
