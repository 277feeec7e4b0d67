"""Starting the security tests' job (tests/support/security_job.py) and looking at it from
outside: its processes' listening TCP sockets, read from /proc; a client of the
authenticating transport that holds the key (KeyedPeer), to play an attacker on the path."""
import hashlib
import hmac
import os
import socket
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
JOB = os.path.join(ROOT, "tests", "support", "security_job.py")
OUTSIDER = os.path.join(ROOT, "tests", "support", "security_outsider.py")
KEY = "0123456789abcdef0123456789abcdef"


# The first bytes of the authenticating transport's handshake (plugin/csrc/auth/auth_transport_link.cpp).
MAGIC = b"GFRPCAU2"


def skip_without_ipv6_loopback(master_addr):
    """Skips the calling test when ``master_addr`` is IPv6 and this machine has no ``::1``
    (IPv6 disabled, as in some containers)."""
    if ":" not in master_addr:
        return
    import pytest

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError as e:
        pytest.skip(f"this machine has no IPv6 loopback address ::1 ({e})")


def free_port(host="127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def environment(key=None):
    env = dict(os.environ)
    env.pop("GILFREE_RPC_AUTH_KEY", None)
    env.pop("GILFREE_RPC_AUTH_KEY_FILE", None)
    for variable in ("TP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        env.pop(variable, None)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    if key is not None:
        env["GILFREE_RPC_AUTH_KEY"] = key
    return env


class Job:
    """The two workers of security_job.py as child processes (keys per rank: None for none)."""

    def __init__(self, out_dir, keys=(None, None), steps=20, pause=0.0, init_timeout=60.0, master_addr="127.0.0.1",
                 extra=()):
        self.out = str(out_dir)
        self.port = free_port(master_addr)
        self.procs = []
        for rank in (0, 1):
            log = open(os.path.join(self.out, f"log.{rank}"), "w")
            self.procs.append(subprocess.Popen(
                [sys.executable, JOB, "--rank", str(rank), "--port", str(self.port), "--out", self.out,
                 "--steps", str(steps), "--pause", str(pause), "--init-timeout", str(init_timeout),
                 "--master-addr", master_addr, *extra],
                env=environment(keys[rank]), stdout=log, stderr=subprocess.STDOUT,
            ))

    def wait_ready(self, timeout=90.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(os.path.exists(os.path.join(self.out, f"ready.{r}")) for r in (0, 1)):
                return
            if any(p.poll() is not None for p in self.procs):
                raise AssertionError(f"a worker exited before RPC ran:\n{self.logs()}")
            time.sleep(0.1)
        raise AssertionError(f"the job did not start within {timeout} s:\n{self.logs()}")

    def wait(self, timeout=120.0):
        deadline = time.monotonic() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"the job did not finish within {timeout} s:\n{self.logs()}")
        return codes

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    # A worker's log may quote bytes a test sent (torch's agent names a pipe by the context
    # name its hello gave): read as text, undecodable bytes replaced.

    def logs(self):
        text = []
        for rank in (0, 1):
            with open(os.path.join(self.out, f"log.{rank}"), errors="replace") as f:
                text.append(f"--- worker{rank} ---\n{f.read()[-4000:]}")
        return "\n".join(text)

    def log(self, rank):
        with open(os.path.join(self.out, f"log.{rank}"), errors="replace") as f:
            return f.read()

    def final(self):
        import torch

        return torch.load(os.path.join(self.out, "final.pt"))


def _socket_inodes(pid):
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _address(hex_address, v6):
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if v6:
        # four 32-bit words, each in host (little-endian) order
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
        return socket.inet_ntop(socket.AF_INET6, raw), int(port, 16)
    return socket.inet_ntop(socket.AF_INET, raw[::-1]), int(port, 16)


def listening_sockets(pids):
    """(address, port) of every TCP socket in state LISTEN that one of ``pids`` holds."""
    inodes = set()
    for pid in pids:
        inodes |= _socket_inodes(pid)
    found = []
    for path, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        with open(path) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: TCP_LISTEN
                    found.append(_address(fields[1], v6))
    return found


def run_outsider(store_port, marker, timeout=120):
    return subprocess.run(
        [sys.executable, OUTSIDER, "--store-port", str(store_port), "--workers", "worker0,worker1",
         "--marker", str(marker)],
        env=environment(), capture_output=True, text=True, timeout=timeout,
    )


# --- a client of the authenticating transport that holds the key ------------------------

def _transport_key(job_key: str) -> bytes:
    # plugin.rpc._configure_auth_transport: the transport's key, derived from the job's
    return hmac.new(job_key.encode(), b"gilfree-rpc transport v1", hashlib.sha256).hexdigest().encode()


def _hkdf(key: bytes, salt: bytes, info: bytes) -> bytes:
    # HKDF-SHA256 (RFC 5869), one block: the transport's derivation of proofs and keys
    prk = hmac.new(salt, key, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()


def _recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        part = sock.recv(n - len(data))
        if not part:
            raise ConnectionError(f"EOF after {len(data)} of {n} bytes")
        data += part
    return data


class KeyedPeer:
    """A connection to a worker's transport port made by the protocol with the key (the
    handshake of plugin/csrc/auth/auth_transport.h, written again here from its description),
    from the loopback address ``source``; then sends whatever frames a test makes with
    :meth:`frame`. Needs the ``cryptography`` package (AES-GCM)."""

    def __init__(self, port, source="127.0.0.1", key=KEY, host="127.0.0.1"):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.sock = socket.create_connection((host, port), timeout=10, source_address=(source, 0))
        nonce = os.urandom(32)
        self.sock.sendall(MAGIC + nonce)
        hello = _recv_exactly(self.sock, len(MAGIC) + 32)
        assert hello[:len(MAGIC)] == MAGIC, hello
        salt = nonce + hello[len(MAGIC):]
        transport_key = _transport_key(key)
        self.sock.sendall(_hkdf(transport_key, salt, b"gilfree-rpc v2 client proof"))
        proof = _recv_exactly(self.sock, 32)
        assert proof == _hkdf(transport_key, salt, b"gilfree-rpc v2 server proof"), "the worker's proof"
        self._aead = AESGCM(_hkdf(transport_key, salt, b"gilfree-rpc v2 client to server"))

    def frame(self, payload: bytes, number: int) -> bytes:
        """Frame ``number`` of this connection's client-to-server direction holding ``payload``:
        sealed length and tag, sealed payload and tag (AES-256-GCM, nonces (0, n) and (1, n))."""
        def nonce(kind):
            return struct.pack("<IQ", kind, number)

        return (self._aead.encrypt(nonce(0), struct.pack("<Q", len(payload)), None)
                + self._aead.encrypt(nonce(1), payload, None))

    def closed_by_worker(self, timeout=15.0) -> bool:
        """Whether the worker closes the connection (EOF or reset) within ``timeout`` s,
        discarding anything it sends meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except socket.timeout:
                return False
            except ConnectionError:
                return True
        return False

    def close(self):
        self.sock.close()
