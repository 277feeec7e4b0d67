"""Short error messages for failures that come back over RPC.

An exception raised by a function run by RPC reaches the caller with the callee's
traceback folded into its message (and, for TorchScript, the interpreter's). The line
that says what went wrong is the last ``SomeError: message`` line; this module finds it
so the caller's message can lead with it, naming the worker, while the full text stays
available as the exception's ``__cause__``.
"""
import builtins
import re
from typing import Optional

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
            # a native op's error ("ValueError: ...", plugin/csrc/local_optimizer.h) as the
            # interpreter that ran its RPC function reports it: "RuntimeError: ValueError: ..."
            inner = summary[len("RuntimeError: "):]
            return inner if summary.startswith("RuntimeError: ") and _ERROR_LINE.match(inner) else summary
    return str(error).strip()


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
