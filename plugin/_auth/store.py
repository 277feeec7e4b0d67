"""The key in the rendezvous: the start-up check's proof that a process holds it
(plugin/_rendezvous.py), and the store whose values carry a MAC, which torch's own start-up
runs over when RPC starts with a key. The key itself never enters the store."""
import hashlib
import hmac

import torch.distributed as dist


def record_proof(key: bytes, prefix: str, record: dict) -> str:
    """An HMAC under the authentication key of what identifies one record of one start-up
    (its prefix, rank, process id and host)."""
    text = f"gilfree-rpc start-up\0{prefix}\0{record['rank']}\0{record['pid']}\0{record['host']}"
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def proves_key(key: bytes, prefix: str, record: dict) -> bool:
    """Whether ``record``'s ``key_proof`` is :func:`record_proof` under ``key``."""
    return hmac.compare_digest(record_proof(key, prefix, record), record.get("key_proof", ""))


def authenticated_store(store: dist.Store, key: bytes) -> "AuthenticatedStore":
    """``store`` behind an :class:`AuthenticatedStore` under a key derived from the job's ``key``."""
    return AuthenticatedStore(store, hmac.new(key, b"gilfree-rpc store v1", hashlib.sha256).digest())


class AuthenticatedStore(dist.Store):
    """A key-value store whose values carry a MAC: ``HMAC-SHA256(key, "store value" | name |
    value)`` (32 bytes) before each value, checked on every read, so a value written or
    moved by a process without the key (the store's port is reachable by anyone who can
    reach the host) is refused, naming the key. Counters (``add``, and ``get`` of a name
    this process added to) and key names carry no MAC (a counter cannot). torch's own start-up (the workers' names and addresses, its Gloo
    group's rendezvous) runs over it when RPC starts with a key.

    Args:
        store (torch.distributed.Store): the store that holds the values.
        key (bytes): the MAC key.
    """

    def __init__(self, store: dist.Store, key: bytes):
        super().__init__()
        self._store = store
        self._key = key
        self._counters = set()  # names this process used as counters: read without a MAC

    def _tag(self, name: str, value: bytes) -> bytes:
        return hmac.new(self._key, b"store value\0" + name.encode() + b"\0" + value, hashlib.sha256).digest()

    @staticmethod
    def _bytes(value) -> bytes:
        return value.encode() if isinstance(value, str) else bytes(value)

    def _open(self, name: str, raw: bytes) -> bytes:
        tag, value = raw[:32], raw[32:]
        if len(raw) < 32 or not hmac.compare_digest(tag, self._tag(name, value)):
            raise RuntimeError(
                f"plugin.rpc: the rendezvous store's value of {name!r} fails its MAC: it was written by a "
                f"process without this job's authentication key"
            )
        return value

    def set(self, key, value):
        value = self._bytes(value)
        self._store.set(key, self._tag(key, value) + value)

    def get(self, key):
        raw = self._store.get(key)
        # torch's shutdown reads the counters it adds to (syncCallCount)
        return raw if key in self._counters else self._open(key, raw)

    def add(self, key, value):
        self._counters.add(key)
        return self._store.add(key, value)

    def compare_set(self, key, expected_value, desired_value):
        expected = self._bytes(expected_value)
        desired = self._bytes(desired_value)
        if expected:
            current = self._store.get(key) if self._store.check([key]) else b""
            if current and self._open(key, current) == expected:
                expected = current
        result = self._store.compare_set(key, expected, self._tag(key, desired) + desired)
        return self._open(key, result) if result else result

    def check(self, keys):
        return self._store.check(keys)

    def wait(self, keys, timeout=None):
        if timeout is None:
            return self._store.wait(keys)
        return self._store.wait(keys, timeout)

    def delete_key(self, key):
        return self._store.delete_key(key)

    def num_keys(self):
        return self._store.num_keys()

    def set_timeout(self, timeout):
        return self._store.set_timeout(timeout)
