"""The authenticated transport's Python half (the C++ half: ``plugin/csrc/auth/``).

With an authentication key (``plugin.rpc.init_rpc(auth_key=...)``, ``docs/security.md``) the
workers talk over the TensorPipe transport ``gilfree_auth`` only, and the rendezvous store's
values carry a MAC. This package holds what the key touches, by role:

* ``keys``: where the job's key comes from (argument, ``GILFREE_RPC_AUTH_KEY``,
  ``GILFREE_RPC_AUTH_KEY_FILE``) and :func:`read_auth_key_file` (public as
  ``plugin.rpc.read_auth_key_file``);
* ``transport``: the transport's configuration (its own key, derived from the job's; the
  libcrypto it loads; the address it listens on), which registers it in torch's registry of
  TensorPipe transports (the op ``_configure_auth_transport``), and the agent options that
  choose it;
* ``store``: the start-up check's proof that a process holds the key, and the MAC'd store
  torch's own start-up runs over (:class:`AuthenticatedStore`).

``plugin.rpc`` (start-up, which picks the listening address from the network interfaces) and
``plugin._rendezvous`` (the start-up check) use it; it uses neither.
"""
from .keys import job_key, read_auth_key_file
from .store import AuthenticatedStore, authenticated_store, proves_key, record_proof
from .transport import (
    AUTH_TRANSPORT,
    backend_options,
    check_transports,
    configure_transport,
    keyless_start,
    libcrypto_path,
)

__all__ = [
    "AUTH_TRANSPORT",
    "AuthenticatedStore",
    "authenticated_store",
    "backend_options",
    "check_transports",
    "configure_transport",
    "job_key",
    "keyless_start",
    "libcrypto_path",
    "proves_key",
    "read_auth_key_file",
    "record_proof",
]
