"""The transport ``gilfree_auth`` (plugin/csrc/auth/auth_transport.h) from Python: its
configuration, which registers it in torch's registry of TensorPipe transports the first time,
and the agent options that make TensorPipe use it alone."""
import hashlib
import hmac
from typing import Dict, List, Mapping, Optional, Sequence

from .. import ops

# The TensorPipe transport that authenticates every connection (plugin/csrc/auth/auth_transport.h).
AUTH_TRANSPORT = "gilfree_auth"

# Whether this process has configured the authenticating transport (and so registered it).
_configured = False


def libcrypto_path() -> str:
    """Path of the OpenSSL libcrypto that Python's hashlib has loaded into this process (so
    the plugin's transport uses the same one), else the one the loader finds."""
    import _hashlib  # noqa: F401 (loads libcrypto)

    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if "/libcrypto.so" in path:
                    return path
    except OSError:
        pass
    import ctypes.util

    found = ctypes.util.find_library("crypto")
    if found is None:
        raise RuntimeError("init_rpc(): authentication needs OpenSSL's libcrypto, which this machine lacks")
    return found


def configure_transport(key: bytes, listen_host: str) -> None:
    """Gives the transport its key (a key of its own, derived from the job's ``key``) and the
    numeric address it listens on, for the agent started next; registers it the first time
    (and, with the first key, runs the self-test of its mirror of TensorPipe's ABI, which
    raises RuntimeError when it fails)."""
    global _configured
    transport_key = hmac.new(key, b"gilfree-rpc transport v1", hashlib.sha256).hexdigest()
    ops._configure_auth_transport(transport_key, libcrypto_path(), listen_host)
    _configured = True


def keyless_start() -> None:
    """Before an agent starts without a key: after a keyed start in this process, the
    registered transport must not be offered (without a key it reports itself not viable;
    torch skips it)."""
    if _configured:
        ops._configure_auth_transport("", "", "")


def check_transports(transports: Optional[Sequence[str]]) -> None:
    """Raises ValueError unless ``transports`` (``init_rpc``'s argument) is None or this
    transport alone: with a key, it is the only one."""
    if transports is not None and list(transports) != [AUTH_TRANSPORT]:
        raise ValueError(
            f"init_rpc(): with an authentication key the only transport is {AUTH_TRANSPORT!r}, got transports={list(transports)}"
        )


def backend_options(device_maps: Mapping) -> Dict[str, List[str]]:
    """The TensorPipe agent's options for a keyed start, given this worker's device maps
    (``{peer: {device: device}}``): only the authenticating transport, and channels that send
    through the pipe's own connections (no listener of their own): basic, and cuda_basic for
    CUDA maps (it copies to the CPU and sends through the basic channel)."""
    cuda = any(d.type == "cuda" for mapping in device_maps.values() for d in mapping)
    return {"_transports": [AUTH_TRANSPORT], "_channels": ["basic"] + (["cuda_basic"] if cuda else [])}
