"""Starting the security tests' job (tests/support/security_job.py) and looking at it from
outside: its processes' listening TCP sockets, read from /proc."""
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
JOB = os.path.join(ROOT, "tests", "support", "security_job.py")
OUTSIDER = os.path.join(ROOT, "tests", "support", "security_outsider.py")
KEY = "0123456789abcdef0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
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

    def __init__(self, out_dir, keys=(None, None), steps=20, pause=0.0, init_timeout=60.0):
        self.out = str(out_dir)
        self.port = free_port()
        self.procs = []
        for rank in (0, 1):
            log = open(os.path.join(self.out, f"log.{rank}"), "w")
            self.procs.append(subprocess.Popen(
                [sys.executable, JOB, "--rank", str(rank), "--port", str(self.port), "--out", self.out,
                 "--steps", str(steps), "--pause", str(pause), "--init-timeout", str(init_timeout)],
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

    def logs(self):
        text = []
        for rank in (0, 1):
            with open(os.path.join(self.out, f"log.{rank}")) as f:
                text.append(f"--- worker{rank} ---\n{f.read()[-4000:]}")
        return "\n".join(text)

    def log(self, rank):
        with open(os.path.join(self.out, f"log.{rank}")) as f:
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
