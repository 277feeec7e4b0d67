"""plugin.rpc start-up and shutdown when the processes of a group disagree or one dies.

Each test starts real processes (tests/support/rpc_lifecycle_job.py) on loopback with
the TensorPipe agent. Start-up: processes that disagree (world size, worker names, a rank
started twice) or a rank that never starts must make init_rpc raise RendezvousError on
every process that is running, naming what disagreed, within a bound. Shutdown: after a
worker is killed with SIGKILL, plugin.rpc.shutdown() must return on every survivor within
its timeout and name the dead worker, where torch's rpc.shutdown() keeps waiting.
"""
import datetime
import json
import os
import subprocess
import sys
import time

import pytest
import torch.distributed as dist

import plugin.rpc
from tests.support import REPO
from tests.support.cluster import free_port

JOB = os.path.join(REPO, "tests", "support", "rpc_lifecycle_job.py")
# Seconds a process may take to import torch and the plugin on a busy 2-core machine.
START_SLACK = 60


def launch(rank, world_size, port, *extra, env=None):
    """Starts one job process, without the torchrun variables of this process, plus ``env``."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE")
    full_env = {k: v for k, v in os.environ.items() if k not in drop}
    full_env.update(OMP_NUM_THREADS="1", PYTHONPATH=REPO + os.pathsep + full_env.get("PYTHONPATH", ""))
    full_env.update(env or {})
    cmd = [sys.executable, JOB, "--rank", str(rank), "--world-size", str(world_size), "--port", str(port)]
    return subprocess.Popen(cmd + [str(a) for a in extra], cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


class Group:
    """Job processes that are killed on exit, whatever happened."""

    def __init__(self):
        self.procs = []

    def start(self, rank, world_size, port, *extra, env=None):
        self.procs.append(launch(rank, world_size, port, *extra, env=env))
        return self.procs[-1]

    def finish(self, procs=None, timeout=START_SLACK + 60):
        """Waits for ``procs`` (default: all); returns [(returncode, events, stderr)]."""
        results = []
        deadline = time.monotonic() + timeout
        for p in procs or self.procs:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
            events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            results.append((p.returncode, events, err))
        return results

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


def init_errors(port, processes, timeout):
    """Starts each ``(rank, world_size, extra arguments)`` of ``processes`` with
    ``--init-timeout timeout`` on ``port``; returns their init_error events, in that order."""
    with Group() as group:
        for rank, world_size, extra in processes:
            group.start(rank, world_size, port, "--init-timeout", timeout, *extra)
        return [init_error(r) for r in group.finish()]


def init_error(result):
    """The init_error event of one finished process (fails the test if there is none)."""
    code, events, err = result
    errors = [e for e in events if e["event"] == "init_error"]
    assert code == 3 and len(errors) == 1, (code, events, err[-3000:])
    assert errors[0]["type"] == "RendezvousError", errors[0]
    return errors[0]


# --- start-up -------------------------------------------------------------------------

# Each case: the (rank, world_size, extra arguments) of every process that is started,
# and the words every process's error must contain (the check's verdict, not a timeout).
# Rank 0 decides at once, but stays until init_timeout for ranks that some process
# expects and that have not arrived (they would find no store and never learn why).
DISAGREEMENTS = {
    "world_size_2_vs_3": (
        [(0, 2, ()), (1, 3, ())],
        ["disagree on the world size", "world_size=3", "world_size=2"],
    ),
    "world_size_rank0_alone": (
        [(0, 2, ()), (1, 3, ()), (2, 3, ())],
        ["disagree on the world size", "rank 0 ('worker0'", "world_size=2"],
    ),
    "duplicate_rank": (
        [(0, 3, ()), (1, 3, ()), (1, 3, ())],
        ["rank 1 was started twice", "'worker1', pid"],
    ),
    "duplicate_rank_0": (
        [(0, 3, ()), (0, 3, ()), (1, 3, ())],
        ["rank 0 was started twice"],
    ),
    "worker_names": (
        [(0, 2, ("--worker-names", "trainer,server")), (1, 2, ("--worker-names", "trainer,ps"))],
        ["disagree on worker_names", "worker_names[1] is 'server' on one and 'ps' on the other"],
    ),
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", sorted(DISAGREEMENTS))
def test_disagreement_fails_on_every_process(case):
    processes, words = DISAGREEMENTS[case]
    timeout = 15
    errors = init_errors(free_port(), processes, timeout)
    for error in errors:
        for word in words:
            assert word in error["message"], (word, error["message"])
        assert "within init_timeout" not in error["message"]
        assert error["seconds"] <= timeout * 1.5 + 5, error
    # every process reports rank 0's verdict (a process that arrives after rank 0 has
    # decided is told it arrived late, and why the check failed)
    verdict = errors[0]["message"]
    assert all(verdict in e["message"] for e in errors), errors


@pytest.mark.timeout(240)
def test_rank_that_never_starts():
    timeout = 8
    errors = init_errors(free_port(), [(0, 3, ()), (1, 3, ())], timeout)
    for error in errors:
        assert "rank(s) [2] of world_size=3 never started" in error["message"], error
        assert "rank 0 ('worker0'" in error["message"] and "rank 1 ('worker1'" in error["message"]
    # rank 0 waits the whole init_timeout, and not much longer
    assert timeout * 0.9 <= errors[0]["seconds"] <= timeout * 1.5 + 5, errors[0]
    assert errors[1]["seconds"] <= timeout * 1.5 + START_SLACK, errors[1]


@pytest.mark.timeout(240)
def test_rank_0_that_never_starts():
    port = free_port()
    timeout = 6
    (error,) = init_errors(port, [(1, 2, ())], timeout)
    assert f"rank 1 found no rendezvous store at localhost:{port} within init_timeout=6 s" in error["message"]
    assert "rank 0 never started" in error["message"]
    assert timeout * 0.9 <= error["seconds"] <= timeout * 1.5 + 5, error


@pytest.mark.timeout(240)
def test_rank_0_late_with_an_agent_store():
    """Under torchrun the agent hosts the store, so rank 1 can arrive and give up before
    rank 0 arrives: it takes the judge's place, and rank 0, arriving later, is told the
    check has ended instead of starting a group alone. (This process hosts the store, as
    torchrun's agent would.)"""
    port = free_port()
    agent_store = dist.TCPStore("localhost", port, None, True, datetime.timedelta(seconds=60), wait_for_workers=False)
    env = {"TORCHELASTIC_USE_AGENT_STORE": "True"}
    timeout = 4
    with Group() as group:
        (first,) = group.finish([group.start(1, 2, port, "--init-timeout", timeout, env=env)])
        (late,) = group.finish([group.start(0, 2, port, "--init-timeout", 60, env=env)])
    error = init_error(first)
    assert "rank(s) [0] of world_size=2 never started" in error["message"], error
    assert timeout * 0.9 <= error["seconds"] <= timeout * 1.5 + 5, error
    late_error = init_error(late)
    assert "rank 0 ('worker0'" in late_error["message"] and "arrived after the start-up check had ended" in late_error["message"]
    assert error["message"] in late_error["message"]  # with the verdict it missed
    assert late_error["seconds"] < 30
    del agent_store


@pytest.mark.timeout(240)
def test_process_arriving_after_the_group_started(tmp_path):
    """A complete, consistent group starts; a third process claiming rank 1 arrives later:
    it gets the error, and the group (which cannot tell it from another job's) runs on."""
    port = free_port()
    go = tmp_path / "go"
    with Group() as group:
        first = [group.start(r, 2, port, "--init-timeout", 60, "--wait-file", go) for r in range(2)]
        # wait until both have started
        lines = [p.stdout.readline() for p in first]
        assert all(json.loads(line)["event"] == "started" for line in lines), lines
        late = group.start(1, 2, port, "--init-timeout", 60)
        (late_result,) = group.finish([late])
        go.write_text("")
        results = group.finish(first)
    error = init_error(late_result)
    assert "arrived after the start-up check had ended" in error["message"], error
    assert "the group of 2 workers ['worker0', 'worker1'] started without it" in error["message"]
    for code, events, err in results:
        assert code == 0, err[-3000:]
        shutdown = [e for e in events if e["event"] == "shutdown"]
        assert shutdown and shutdown[0]["result"] == [] and shutdown[0]["warnings"] == [], events


def test_bad_init_timeout_is_rejected_before_anything_starts():
    with pytest.raises(ValueError, match=r"init_timeout must be > 0 seconds, got 0"):
        plugin.rpc.init_rpc(rank=0, world_size=2, master_port=1, init_timeout=0)


# --- shutdown -------------------------------------------------------------------------


@pytest.mark.timeout(240)
@pytest.mark.parametrize("victim", [0, 2])  # rank 0 hosts the store and leads torch's barrier
def test_shutdown_after_a_worker_was_killed(victim):
    port = free_port()
    timeout = 20
    with Group() as group:
        for r in range(3):
            group.start(r, 3, port, "--kill-rank", victim, "--shutdown-timeout", timeout)
        results = group.finish()
    dead = f"worker{victim}"
    for rank, (code, events, err) in enumerate(results):
        if rank == victim:
            assert code == -9, (code, events, err[-3000:])
            continue
        assert code == 0, err[-3000:]
        (shutdown,) = [e for e in events if e["event"] == "shutdown"]
        assert shutdown["result"] == [dead], shutdown
        assert shutdown["seconds"] < timeout, shutdown
        (warning,) = shutdown["warnings"]
        assert f"'worker{rank}' shut down without waiting for the other workers: '{dead}' is unreachable" in warning


@pytest.mark.timeout(240)
def test_torch_shutdown_keeps_waiting_after_a_worker_was_killed():
    """The comparison: torch's graceful rpc.shutdown() on the survivors does not return."""
    port = free_port()
    with Group() as group:
        procs = [group.start(r, 3, port, "--kill-rank", 2, "--torch-shutdown") for r in range(3)]
        for p in procs[:2]:  # read until each survivor has called torch's shutdown
            events = []
            for line in p.stdout:
                events.append(json.loads(line))
                if events[-1]["event"] == "torch_shutdown_called":
                    break
            assert events and events[-1]["event"] == "torch_shutdown_called", (events, p.poll())
        assert procs[2].wait(timeout=START_SLACK + 60) == -9
        time.sleep(15)
        assert [p.poll() for p in procs[:2]] == [None, None], "torch's shutdown returned after a worker died"


@pytest.mark.timeout(240)
def test_shutdown_waits_for_a_live_worker_beyond_the_rpc_timeout():
    """Graceful, default timeout: rank 1 reaches shutdown 6 s after the others, twice the
    RPC timeout; it answers their probes, so they wait for it, as torch's shutdown does."""
    port = free_port()
    with Group() as group:
        for r in range(3):
            group.start(r, 3, port, "--rpc-timeout", 3, "--late-rank", 1, "--late-by", 6)
        results = group.finish()
    for rank, (code, events, err) in enumerate(results):
        assert code == 0, err[-3000:]
        (shutdown,) = [e for e in events if e["event"] == "shutdown"]
        assert shutdown["result"] == [] and shutdown["warnings"] == [], shutdown
        if rank != 1:
            assert shutdown["seconds"] >= 5, shutdown


@pytest.mark.timeout(240)
def test_shutdown_gives_up_on_a_hung_worker_after_the_rpc_timeout():
    """Rank 2 stops itself (SIGSTOP): its connections stay open, but it answers nothing.
    The others' probes time out after the RPC timeout (4 s); they return naming it."""
    port = free_port()
    rpc_timeout = 4
    with Group() as group:
        procs = [group.start(r, 3, port, "--rpc-timeout", rpc_timeout, "--kill-rank", 2, "--signal", "SIGSTOP")
                 for r in range(3)]
        results = group.finish(procs[:2])
    for rank, (code, events, err) in enumerate(results):
        assert code == 0, err[-3000:]
        (shutdown,) = [e for e in events if e["event"] == "shutdown"]
        assert shutdown["result"] == ["worker2"], shutdown
        assert "'worker2' is unreachable" in shutdown["warnings"][0], shutdown
        assert shutdown["seconds"] <= rpc_timeout * 2 + 5, shutdown


@pytest.mark.timeout(240)
def test_shutdown_names_a_worker_that_does_not_arrive_in_time():
    """Rank 1 is alive but reaches shutdown 25 s late; with timeout=5 the others stop
    after about 5 s, naming it; rank 1 then finds them gone and names them."""
    port = free_port()
    timeout = 5
    with Group() as group:
        for r in range(3):
            group.start(r, 3, port, "--late-rank", 1, "--late-by", 25, "--shutdown-timeout", timeout)
        results = group.finish()
    for rank, (code, events, err) in enumerate(results):
        assert code == 0, err[-3000:]
        (shutdown,) = [e for e in events if e["event"] == "shutdown"]
        if rank == 1:
            # they arrived (and told rank 1 so) before they stopped
            assert shutdown["result"] == [], shutdown
            assert "'worker0', 'worker2' reached shutdown() and stopped before this worker did" in shutdown["warnings"][0]
        else:
            assert shutdown["result"] == ["worker1"], shutdown
            assert "'worker1' did not reach shutdown() within 5 s" in shutdown["warnings"][0], shutdown
            assert timeout * 0.9 <= shutdown["seconds"] <= timeout * 1.5 + 5, shutdown


def test_bad_shutdown_timeout_is_rejected():
    for bad in (-1, 0):
        with pytest.raises(ValueError, match=rf"shutdown\(\): timeout must be > 0 seconds \(or None\), got {bad}"):
            plugin.rpc.shutdown(timeout=bad)
