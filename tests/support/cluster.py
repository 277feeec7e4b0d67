"""A real RPC group on loopback for the tests: TensorPipe agent, separate processes.

The test process itself is ``worker0``; ``Cluster`` starts ``worker1 .. worker{N-1}`` as
child processes (multiprocessing "spawn"), each of which imports ``plugin`` and serves
RPCs until the group shuts down.
"""
import multiprocessing
import os
import socket
import warnings

import torch.distributed.rpc as rpc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


# Set (to a key of 16 bytes or more), the tests' clusters talk over the plugin's
# authenticating transport, as plugin.rpc.init_rpc(auth_key=...) makes them
# (tests/auth runs fault scenarios so; child processes inherit the variable).
AUTH_KEY_ENV = "GILFREE_TEST_AUTH_KEY"


# The group's start-up (the store's rendezvous, every worker's address exchange) waits this long
# at least, whatever the RPC timeout a fault test sets afterwards (2 or 3 s there): torch bounds
# the start-up by the options' rpc_timeout, and a loaded machine (CI runs two test files at a
# time) can take longer than that to start a worker process. Not more: the engine's peer watch
# pings every half RPC timeout, and one period begun during the start-up keeps the start-up's
# timeout (with 120 s, a killed worker went unnoticed for a minute in a fault test).
START_TIMEOUT = 10.0


def backend_options(num_worker_threads: int, rpc_timeout: float):
    extra = {}
    key = os.environ.get(AUTH_KEY_ENV)
    if key:
        import plugin._auth
        import plugin.rpc

        os.environ.setdefault("TP_SOCKET_IFNAME", "lo")
        plugin.rpc._configure_auth_transport(key.encode(), "localhost")
        extra = {"_transports": [plugin._auth.AUTH_TRANSPORT], "_channels": ["basic"]}
    return rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=num_worker_threads, rpc_timeout=rpc_timeout, init_method="env://", **extra
    )


def _serve(rank: int, world_size: int, port: int, num_worker_threads: int, rpc_timeout: float, imports):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    warnings.simplefilter("ignore", DeprecationWarning)
    import importlib

    import plugin  # noqa: F401  (compiles the engine's RPC handlers)

    for name in imports:
        importlib.import_module(name)
    rpc.init_rpc(
        f"worker{rank}",
        rank=rank,
        world_size=world_size,
        rpc_backend_options=backend_options(num_worker_threads, max(rpc_timeout, START_TIMEOUT)),
    )
    rpc._set_rpc_timeout(rpc_timeout)  # the default timeout of every RPC from here on
    rpc.shutdown()


class Cluster:
    """``world_size`` RPC workers; this process is ``worker0``.

    Args:
        world_size: number of workers, this process included.
        num_worker_threads: TensorPipe server threads of every worker.
        rpc_timeout: default RPC timeout in seconds.
        imports: modules the helper processes import before serving (for functions
            called by RPC that pickle by reference).
    """

    def __init__(self, world_size=4, num_worker_threads=4, rpc_timeout=30.0, imports=()):
        self.world_size = world_size
        self.num_worker_threads = num_worker_threads
        self.rpc_timeout = rpc_timeout
        self.imports = tuple(imports)
        self._procs = []

    def start(self):
        import plugin  # noqa: F401

        port = free_port()
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = str(port)
        ctx = multiprocessing.get_context("spawn")
        for rank in range(1, self.world_size):
            p = ctx.Process(
                target=_serve,
                args=(rank, self.world_size, port, self.num_worker_threads, self.rpc_timeout, self.imports),
                daemon=True,
            )
            p.start()
            self._procs.append(p)
        rpc.init_rpc(
            "worker0",
            rank=0,
            world_size=self.world_size,
            rpc_backend_options=backend_options(self.num_worker_threads, max(self.rpc_timeout, START_TIMEOUT)),
        )
        rpc._set_rpc_timeout(self.rpc_timeout)
        return self

    def stop(self):
        try:
            rpc.shutdown()
        finally:
            for p in self._procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
            self._procs = []

    def abandon(self, code: int):
        """Ends a fault scenario's process without a shutdown (a peer may be dead or stopped):
        kills every worker (SIGKILL, which also ends a stopped one), flushes the output and
        exits with ``code``."""
        import signal
        import sys

        for p in self._procs:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
