"""Issue 21: nothing listens beyond the job's interface, and with an authentication key
nobody outside the job can make a worker run anything or crash it.

Every test runs the real two-worker training job of tests/support/security_job.py
(plugin.rpc.init_rpc on loopback, TensorPipe agent) in child processes; the key comes from
the environment, as under torchrun.
"""
import os
import random
import socket
import struct
import time

import pytest
import torch

from tests.auth.jobs import KEY, MAGIC, Job, listening_sockets, run_outsider, skip_without_ipv6_loopback

pytestmark = pytest.mark.timeout(300)


def _loopback(address):
    return address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1")


@pytest.mark.parametrize("key, master_addr", [(None, "127.0.0.1"), (KEY, "127.0.0.1"), (KEY, "::1")],
                         ids=["no_key", "key", "key_ipv6"])
def test_every_listening_socket_is_on_loopback(tmp_path, key, master_addr):
    skip_without_ipv6_loopback(master_addr)
    job = Job(tmp_path, keys=(key, key), steps=30, pause=0.1, master_addr=master_addr)
    try:
        job.wait_ready()
        sockets = listening_sockets([p.pid for p in job.procs])
        assert ((master_addr, job.port)) in sockets, sockets  # the rendezvous store, on loopback only
        assert all(_loopback(address) for address, _ in sockets), sockets
        if key is not None:
            # the store, and one listener of the authenticating transport per worker, all on
            # master_addr's address (IPv6 for ::1)
            assert len(sockets) == 3 and {address for address, _ in sockets} == {master_addr}, sockets
        assert job.wait() == [0, 0], job.logs()
    finally:
        job.kill()


@pytest.mark.parametrize("key", [None, KEY], ids=["no_key", "key"])
def test_outsider_using_torch_rpc(tmp_path, key):
    """Without a key, torch's own RPC run from outside the job makes both workers run
    os.system (the attack works: the test's control); with a key it runs nowhere and the
    job trains on."""
    # 150 steps of 0.1 s: the job (and its store) outlives the outsider's start-up, which takes
    # seconds when the machine is busy (CI runs two test files at a time)
    job = Job(tmp_path, keys=(key, key), steps=150, pause=0.1)
    marker = tmp_path / "pwned"
    try:
        job.wait_ready()
        result = run_outsider(job.port, marker)
        assert result.returncode == 0, result.stdout + result.stderr  # the outsider itself survives too
        if key is None:
            assert marker.exists(), result.stdout
            assert result.stdout.count("the call ran") == 2, result.stdout
        else:
            assert not marker.exists(), result.stdout
            assert "the call ran" not in result.stdout, result.stdout
        assert job.wait() == [0, 0], job.logs()
        assert "DONE steps=150" in job.log(0)
        if key is not None:
            # one log line per peer address that failed to authenticate
            assert job.log(0).count("[gilfree-rpc] dropped a connection from 127.0.0.1") == 1, job.logs()
            assert job.log(1).count("[gilfree-rpc] dropped a connection from 127.0.0.1") == 1, job.logs()
    finally:
        job.kill()
    assert marker.exists() == (key is None)


def _garbage(kind, rng):
    if kind == "random_64k":
        return rng.randbytes(65536)
    if kind == "absurd_length":
        return struct.pack("<Q", (1 << 63) - 1)
    if kind == "absurd_length_after_magic":  # a frame header after a forged hello
        return MAGIC + rng.randbytes(32) + struct.pack("<Q", (1 << 62)) + rng.randbytes(32)
    if kind == "truncated_hello":
        return MAGIC + rng.randbytes(rng.randrange(0, 32))
    if kind == "wrong_proof":
        return MAGIC + rng.randbytes(32) + rng.randbytes(32)
    if kind == "seven_bytes":
        return rng.randbytes(7)
    raise AssertionError(kind)


KINDS = ["random_64k", "absurd_length", "absurd_length_after_magic", "truncated_hello", "wrong_proof", "seven_bytes"]


def _attack(ports, connections, rng):
    """Opens `connections` connections in all, round robin over the ports and the kinds of
    garbage; returns how many were accepted by the kernel."""
    sent = 0
    for i in range(connections):
        port = ports[i % len(ports)]
        kind = KINDS[(i // len(ports)) % len(KINDS)]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.settimeout(2)
                s.sendall(_garbage(kind, rng))
                sent += 1
        except OSError:
            pass  # refused (a port that closed) or reset by the peer: both fine
    return sent


def test_garbage_to_every_port_changes_nothing(tmp_path):
    """Random bytes, truncated frames and absurd length fields sent to every listening
    port of a running job with a key (1,000 connections): no worker crashes, and the job
    ends with the same parameters as an undisturbed run of the same seed."""
    steps = 40
    (tmp_path / "quiet").mkdir()
    quiet = Job(tmp_path / "quiet", keys=(KEY, KEY), steps=steps)
    try:
        assert quiet.wait() == [0, 0], quiet.logs()
    finally:
        quiet.kill()
    expected = quiet.final()

    (tmp_path / "attacked").mkdir()
    job = Job(tmp_path / "attacked", keys=(KEY, KEY), steps=steps, pause=0.1)
    try:
        job.wait_ready()
        ports = [port for _, port in listening_sockets([p.pid for p in job.procs])]
        assert len(ports) == 3, ports
        sent = _attack(ports, 1000, random.Random(0))
        assert sent > 900, sent
        assert all(p.poll() is None for p in job.procs), job.logs()
        assert job.wait() == [0, 0], job.logs()
    finally:
        job.kill()
    assert "DONE steps=40" in job.log(0), job.logs()
    assert torch.equal(job.final(), expected)


@pytest.mark.parametrize(
    "keys, culprit",
    [
        ((KEY, KEY[::-1]), "was started with another authentication key"),
        ((KEY, None), "was started without an authentication key"),
        ((None, KEY), "was started with an authentication key"),
    ],
    ids=["different_keys", "rank1_without_key", "rank0_without_key"],
)
def test_start_up_refuses_workers_whose_keys_differ(tmp_path, keys, culprit):
    init_timeout = 20.0
    start = time.monotonic()
    job = Job(tmp_path, keys=keys, steps=1, init_timeout=init_timeout)
    try:
        codes = job.wait(timeout=init_timeout + 60)
    finally:
        job.kill()
    assert codes == [1, 1], job.logs()
    for rank in (0, 1):
        log = job.log(rank)
        assert "RendezvousError" in log and culprit in log and "rank 1 ('worker1'" in log, job.logs()
    assert time.monotonic() - start < init_timeout + 30
