"""Starting and stopping the main job's workers (``scripts/train.py``).

:func:`start` runs the job: under torchrun (``RANK`` set) this process is one worker; otherwise
it starts every worker on this machine (one process each, ``multiprocessing``'s spawn) and
waits for them. :func:`init_worker_rpc` is the one place where a worker joins the RPC group.

Stopping: SIGINT or SIGTERM to the launching process ends every worker within a few seconds,
prints one line and returns 128 + the signal number; a worker that dies ends the others and
the launcher returns 1; a worker ends when the launching process dies, however it dies.
"""
import os
import signal
import sys

import torch

# Every process uses TensorPipe's uv (TCP) transport: the default transports include shared
# memory, whose reactor thread busy-polls a CPU core in every process even when idle; with
# more worker processes than cores that polling, not the job, would take the CPU. uv also
# is what connects workers on different hosts.
TRANSPORTS = ["uv"]


def init_worker_rpc(rank, names, master_addr=None, port=None, auth_key_file=None):
    """Joins this process to the job's RPC group as ``names[rank]`` (the job's only init_rpc).

    With ``auth_key_file`` (``--auth-key-file``) the workers prove the key on every
    connection and MAC every message (docs/security.md); they then talk over the
    authenticating transport, a TCP one like uv, which init_rpc picks by itself.
    """
    import plugin.rpc

    key = plugin.rpc.read_auth_key_file(auth_key_file) if auth_key_file else None
    # a key from the environment (GILFREE_RPC_AUTH_KEY[_FILE], torchrun jobs) also needs that transport
    keyed = key is not None or bool(os.environ.get("GILFREE_RPC_AUTH_KEY") or os.environ.get("GILFREE_RPC_AUTH_KEY_FILE"))
    plugin.rpc.init_rpc(
        rank=rank,
        world_size=len(names),
        master_addr=master_addr,
        master_port=port,
        worker_names=names,
        num_worker_threads=8,
        rpc_timeout=120,
        transports=None if keyed else TRANSPORTS,
        auth_key=key,
    )


def run_worker(rank, names, coordinate, args, port=None, master_addr=None):
    """One worker: joins the group; rank 0 runs ``coordinate(args)``; every worker then leaves
    the group (bounded: after a worker died, it names it instead of waiting forever)."""
    import faulthandler

    import plugin.rpc

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 <pid>: every thread's stack
    torch.set_num_threads(1)
    init_worker_rpc(rank, names, master_addr, port, args.auth_key_file)
    try:
        if rank == 0:
            coordinate(args)
    finally:
        unreachable = plugin.rpc.shutdown()
    if unreachable:
        raise SystemExit(f"train.py: {names[rank]}: shutdown could not wait for {', '.join(unreachable)}")


def start(args, names, coordinate):
    """Runs the job; returns the exit status (see :func:`launch`)."""
    if "RANK" in os.environ:  # started by torchrun: this process is one worker
        run_worker(int(os.environ["RANK"]), names, coordinate, args)
        return 0
    from socket import socket

    port = args.port
    if not port:
        with socket() as s:
            s.bind(("localhost", 0))
            port = s.getsockname()[1]
    return launch(names, coordinate, args, port)


def _spawned_worker(rank, names, coordinate, args, port, parent_pid):
    """Entry point of a worker process started by :func:`launch`."""
    # Ctrl-C reaches the whole process group: the launching process alone handles it and
    # ends the workers (it started this process with SIGINT blocked, so that a Ctrl-C while
    # Python starts up is not a KeyboardInterrupt here). And a worker ends when the
    # launching process dies, however it dies.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _die_with_parent(parent_pid)
    run_worker(rank, names, coordinate, args, port, "localhost")


def _die_with_parent(parent_pid):
    """Asks Linux to SIGKILL this process when its parent dies (prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: the launcher's signal handler still ends the workers
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


class _Stop(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def launch(names, coordinate, args, port):
    """Starts every worker on this machine and waits for them.

    Returns the exit status: 0 when every worker ended well; 1 when one failed (the others
    are ended); 128 + signal number after SIGINT or SIGTERM (every worker ended).
    """
    import faulthandler
    import multiprocessing

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 <pid>: the launcher's stacks too
    ctx = multiprocessing.get_context("spawn")
    procs = []

    def on_signal(signum, frame):
        raise _Stop(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        # The workers inherit a blocked SIGINT (see _spawned_worker); a SIGINT that arrives
        # meanwhile waits here until the unblock, then stops the job as usual.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for rank, name in enumerate(names):
                p = ctx.Process(target=_spawned_worker, args=(rank, names, coordinate, args, port, os.getpid()),
                                name=name)
                p.start()
                procs.append(p)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        while True:
            codes = [p.exitcode for p in procs]
            failed = [(p.name, c) for p, c in zip(procs, codes) if c not in (None, 0)]
            if failed:
                _end(procs)
                name, code = failed[0]
                print(f"train.py: worker {name} exited with status {code}; ended the other workers", file=sys.stderr,
                      flush=True)
                return 1
            if all(c == 0 for c in codes):
                return 0
            procs[0].join(0.2)
    except _Stop as stop:
        for s in old:  # a second signal must not interrupt the clean-up
            signal.signal(s, signal.SIG_IGN)
        n = _end(procs)
        name = signal.Signals(stop.signum).name
        print(f"train.py: stopped by {name}; ended {n} worker processes", file=sys.stderr, flush=True)
        return 128 + stop.signum
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _end(procs):
    """Ends every live worker; returns how many were alive.

    Every worker is frozen (SIGSTOP) before any is killed (SIGKILL): a worker that saw a
    peer die first would report the broken connection (TensorPipe logs one warning per
    peer) although the job is being stopped on purpose. A frozen process runs no more code,
    so none of them sees the others go. The workers hold nothing that needs a clean exit:
    checkpoints are written to a temporary folder and renamed, and TensorPipe's uv transport
    leaves no shared memory behind.
    """
    alive = [p for p in procs if p.exitcode is None]
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for p in alive:
            try:
                os.kill(p.pid, sig)
            except OSError:  # it has just exited
                pass
    for p in alive:
        p.join(5.0)
    return len(alive)
