"""Issue 44, item 8: the transport's mirror of TensorPipe's ABI (plugin/csrc/auth/tensorpipe_abi.h)
is checked before use. The first start with a key runs a self-test over loopback in a child
process (plugin/csrc/auth/auth_transport_selftest.h): TensorPipe's own code sends a message
with a payload and a tensor, and a reply, through the transport, and what arrives is compared
with what was sent. On this torch it passes and RPC with a key runs; with a deliberately
broken expectation of the ABI (the test-only variable GILFREE_RPC_TEST_ABI_FAULT, read in the
self-test's child only) start-up refuses with an error that names the torch version and what
differed, and the worker, which ran nothing of the broken mirror, lives on.
"""
import os
import subprocess
import sys

import pytest
import torch

from tests.auth.jobs import KEY, environment, free_port

pytestmark = pytest.mark.timeout(300)

# One worker starts RPC with a key and calls itself (through the transport: TensorPipe's agent
# sends to itself over a pipe), or prints why start-up was refused and that it is still alive.
WORKER = r"""
import sys
import torch
import torch.distributed.rpc as rpc
import plugin.rpc

try:
    plugin.rpc.init_rpc("worker0", rank=0, world_size=1, master_addr="127.0.0.1", master_port=int(sys.argv[1]),
                        auth_key=sys.argv[2], init_timeout=60)
except (RuntimeError, ValueError) as e:
    print("REFUSED " + str(e).replace("\n", " "), flush=True)
    print("ALIVE", flush=True)
    sys.exit(0)
answer = rpc.rpc_sync("worker0", torch.add, args=(torch.arange(70000.0), 1))
print("STARTED", bool(torch.equal(answer, torch.arange(70000.0) + 1)), flush=True)
plugin.rpc.shutdown()
"""


def _start_worker(fault=None):
    env = environment()
    env.pop("GILFREE_RPC_TEST_ABI_FAULT", None)
    if fault is not None:
        env["GILFREE_RPC_TEST_ABI_FAULT"] = fault
    return subprocess.run([sys.executable, "-c", WORKER, str(free_port()), KEY], env=env, capture_output=True,
                          text=True, timeout=240)


def test_the_self_test_passes_on_this_torch_and_rpc_with_a_key_runs():
    result = _start_worker()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "STARTED True" in result.stdout, result.stdout + result.stderr
    assert "REFUSED" not in result.stdout


# fault: what the refusal says the self-test found
FAULTS = {
    # TensorPipe's reader, given fields in an order it does not have, reads through a bad
    # pointer when it decodes the first object (the listener's hello): the child dies of it.
    "reader_layout": "the self-test process died of signal 11 (Segmentation fault) while connecting a pipe",
    # A status read as an error where TensorPipe's says none: the listener fails on the hello.
    "status": "TensorPipe's listener failed: ",
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_broken_expectation_of_the_abi_refuses_start_up_and_the_worker_lives(fault):
    result = _start_worker(fault)
    assert result.returncode == 0, result.stdout + result.stderr  # not -11: the worker did not crash
    assert "ALIVE" in result.stdout, result.stdout + result.stderr
    refusal = [line for line in result.stdout.splitlines() if line.startswith("REFUSED ")]
    assert len(refusal) == 1, result.stdout + result.stderr
    version = torch.__version__.split("+")[0]
    assert f"gilfree_auth refuses to start: TensorPipe in this torch ({version})" in refusal[0], refusal[0]
    assert FAULTS[fault] in refusal[0], refusal[0]
    # Nothing of the child's reaches the worker's output but its verdict.
    assert "Segmentation fault" not in result.stderr and "[gilfree-rpc]" not in result.stderr, result.stderr


def test_an_unknown_fault_name_is_refused():
    result = _start_worker("no_such_fault")
    assert "REFUSED" in result.stdout and "names no fault of the mirror: 'no_such_fault'" in result.stdout, (
        result.stdout + result.stderr)
