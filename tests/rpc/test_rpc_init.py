"""plugin.rpc.init_rpc: settings from arguments or torchrun, and the device-map table."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from tests.support.cluster import free_port
from plugin.rpc import resolve_device_maps
from tests.support import REPO

SUPPORT = os.path.join(REPO, "tests", "support")
NAMES = ["worker0", "worker1", "worker2"]
cuda = torch.device


def test_rows_apply_in_both_directions():
    table = {"worker0": {"worker1": {"cuda:0": "cuda:1"}}, "worker1": {"worker2": {1: 0}}}
    assert resolve_device_maps(table, "worker0", NAMES, 2) == {"worker1": {cuda("cuda:0"): cuda("cuda:1")}}
    assert resolve_device_maps(table, "worker1", NAMES, 2) == {
        "worker0": {cuda("cuda:1"): cuda("cuda:0")},
        "worker2": {cuda("cuda:1"): cuda("cuda:0")},
    }
    assert resolve_device_maps(table, "worker2", NAMES, 2) == {"worker1": {cuda("cuda:0"): cuda("cuda:1")}}


def test_consistent_rows_in_both_directions_are_accepted():
    table = {"worker0": {"worker1": {"cuda:0": "cuda:1"}}, "worker1": {"worker0": {"cuda:1": "cuda:0"}}}
    assert resolve_device_maps(table, "worker1", NAMES, 2) == {"worker0": {cuda("cuda:1"): cuda("cuda:0")}}


def test_no_table_means_no_maps():
    assert resolve_device_maps({}, "worker0", NAMES, 0) == {}


@pytest.mark.parametrize(
    "table, error, message",
    [
        ({"worker9": {"worker1": {0: 0}}}, ValueError, "unknown worker 'worker9'"),
        ({"worker0": {"trainer": {0: 0}}}, ValueError, r"device_maps\['worker0'\]: unknown worker 'trainer'"),
        ({"worker0": {"worker0": {0: 0}}}, ValueError, "a worker has no device map to itself"),
        ({"worker0": {"worker1": {}}}, ValueError, "must be a non-empty dict"),
        ({"worker0": {"worker1": {"cuda:0": "gpu7"}}}, ValueError, "'gpu7' is not a device"),
        (
            {"worker0": {"worker1": {"cuda:0": "cuda:0", "cuda:1": "cuda:0"}}},
            ValueError,
            r"cannot be inverted: cuda:0 and cuda:1 both map to cuda:0",
        ),
        (
            {"worker0": {"worker1": {"cuda:0": "cuda:1"}}, "worker1": {"worker0": {"cuda:0": "cuda:0"}}},
            ValueError,
            "are inconsistent",
        ),
        ({"worker0": {"worker1": {"cuda:3": "cuda:0"}}}, ValueError, r"cuda:3 .* does not exist on 'worker0', which has 2"),
        ({"worker1": {"worker0": {"cuda:0": "cuda:5"}}}, ValueError, r"cuda:5 .* does not exist on 'worker0'"),
        (["worker0"], TypeError, "device_maps must be a dict"),
    ],
    ids=["unknown_worker", "unknown_peer", "self_map", "empty", "not_a_device", "not_invertible", "inconsistent",
         "missing_device", "missing_device_by_inverse", "not_a_dict"],
)
def test_invalid_tables_are_rejected(table, error, message):
    with pytest.raises(error, match=message):
        resolve_device_maps(table, "worker0", NAMES, 2)


def run(cmd, env=None):
    """Starts `cmd` without the torchrun variables of this process (the test cluster sets
    MASTER_ADDR and MASTER_PORT), plus `env`."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    full_env.update(env or {})
    return subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("transports", [None, "uv"])
def test_explicit_arguments(transports):
    port = free_port()
    extra = ["--transports", transports] if transports else []
    procs = [
        run([sys.executable, os.path.join(SUPPORT, "rpc_init_job.py"), "--rank", str(r), "--world-size", "2",
             "--port", str(port)] + extra)
        for r in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert outs[0][0].strip().splitlines()[-2:] == ["OK worker0 worker1 [2.0, 4.0, 6.0]", "timeout 30.0"]


def test_no_rpc_timeout():
    """rpc_timeout=0 (none): the group starts (torch's own start-up would give its store a
    timeout of 0, which expires at once) and every agent's default timeout is 0."""
    port = free_port()
    procs = [
        run([sys.executable, os.path.join(SUPPORT, "rpc_init_job.py"), "--rank", str(r), "--world-size", "2",
             "--port", str(port), "--rpc-timeout", "0"])
        for r in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert outs[0][0].strip().splitlines()[-2:] == ["OK worker0 worker1 [2.0, 4.0, 6.0]", "timeout 0.0"]
    assert outs[1][0].strip().splitlines()[-1] == "timeout 0.0"


def test_torchrun_environment():
    port = free_port()
    proc = run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={port}",
         os.path.join(SUPPORT, "rpc_init_job.py")],
        env={"OMP_NUM_THREADS": "1"},
    )
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    assert "OK worker0 worker1 [2.0, 4.0, 6.0]" in out


def test_missing_settings_and_bad_maps_fail_before_rpc_starts():
    code = textwrap.dedent(
        """
        import torch.distributed.rpc as rpc
        import plugin.rpc
        base = {"rank": 0, "world_size": 2, "master_port": 1}
        for kwargs in ({}, dict(base, device_maps={"worker0": {"worker1": {"cuda:0": "cuda:0"}}}),
                       dict(base, rank=2), dict(base, worker_names=["a", "a"]), dict(base, worker_names=["a"]),
                       dict(base, name="b", worker_names=["a", "b"]), dict(base, num_worker_threads=0),
                       dict(base, rpc_timeout=-1), dict(base, init_timeout=0)):
            try:
                plugin.rpc.init_rpc(**kwargs)
            except ValueError as e:
                print(type(e).__name__, str(e).split(" (")[0])
        print("agent started:", rpc.api._is_current_rpc_agent_set())
        """
    )
    proc = run([sys.executable, "-c", code], env={"CUDA_VISIBLE_DEVICES": ""})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines() == [
        "ValueError init_rpc(): rank was not given and RANK is not set",
        "ValueError device_maps: cuda:0",
        "ValueError init_rpc(): rank must be in [0, 2), got 2",
        "ValueError init_rpc(): worker_names must hold 2 distinct names, got ['a', 'a']",
        "ValueError init_rpc(): worker_names must hold 2 distinct names, got ['a']",
        "ValueError init_rpc(): name 'b' is not worker_names[0] = 'a'",
        "ValueError init_rpc(): num_worker_threads must be >= 1, got 0",
        "ValueError init_rpc(): rpc_timeout must be >= 0 seconds, got -1",
        "ValueError init_rpc(): init_timeout must be > 0 seconds, got 0",
        "agent started: False",
    ]
