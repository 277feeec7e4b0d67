"""The job's authentication key: from ``init_rpc``'s argument, else ``GILFREE_RPC_AUTH_KEY``,
else the file ``GILFREE_RPC_AUTH_KEY_FILE`` names; at least 16 bytes."""
import os
from typing import Optional

# Fewest bytes of key accepted (128 bits as hex or raw).
_MIN_KEY_BYTES = 16


def read_auth_key_file(path: str) -> bytes:
    """Reads an authentication key from the file at ``path``: its bytes, less trailing
    whitespace (a key written with ``openssl rand -hex 32 > key`` ends with a newline).

    Pass the result as ``init_rpc(auth_key=...)``, or name the file in the environment
    variable ``GILFREE_RPC_AUTH_KEY_FILE``, which :func:`~plugin.rpc.init_rpc` reads the same way.

    Args:
        path (str): the key file; readable by the job's user only, ideally (``chmod 600``).

    Returns:
        bytes: the key, at least 16 bytes.

    Raises:
        OSError: the file cannot be read.
        ValueError: the key is shorter than 16 bytes (the message names the file).
    """
    with open(path, "rb") as f:
        key = f.read().rstrip()
    return _long_enough(key, f"the authentication key in {path!r}", f" (for example: openssl rand -hex 32 > {path})")


def _long_enough(key: bytes, what: str, hint: str = "") -> bytes:
    """``key``, or ValueError naming ``what`` when it is shorter than the fewest bytes accepted."""
    if len(key) < _MIN_KEY_BYTES:
        raise ValueError(f"init_rpc(): {what} has {len(key)} bytes; at least {_MIN_KEY_BYTES} are needed{hint}")
    return key


def job_key(auth_key) -> Optional[bytes]:
    """The key from the argument, else ``GILFREE_RPC_AUTH_KEY``, else the file named by
    ``GILFREE_RPC_AUTH_KEY_FILE``; None when none is given."""
    if auth_key is not None:
        if isinstance(auth_key, str):
            auth_key = auth_key.encode()
        if not isinstance(auth_key, (bytes, bytearray)):
            raise TypeError(f"init_rpc(): auth_key must be str or bytes, got {type(auth_key).__name__}")
        return _long_enough(bytes(auth_key), "auth_key", " (for example: openssl rand -hex 32)")
    if os.environ.get("GILFREE_RPC_AUTH_KEY"):
        return _long_enough(os.environ["GILFREE_RPC_AUTH_KEY"].encode(), "GILFREE_RPC_AUTH_KEY")
    if os.environ.get("GILFREE_RPC_AUTH_KEY_FILE"):
        return read_auth_key_file(os.environ["GILFREE_RPC_AUTH_KEY_FILE"])
    return None
