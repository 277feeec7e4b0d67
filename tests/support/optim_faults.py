"""Fault scenarios for the distributed optimizer, each in a fresh RPC group of its own.

A group is three processes: ``trainer`` (the driver: it builds the optimizer, runs the
scenario and reports), ``healthy`` and ``victim`` (owners of one parameter each). The
driver stops (SIGSTOP) or kills (SIGKILL) the victim at the scenario's point and reports
what the caller saw: the error message, the time the call took, and the healthy owner's
parameter and optimizer state before and after. The group is never shut down: the test
kills every process when the driver has reported (or when its time is up).
"""
import os
import signal
import threading
import time
import traceback
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

from tests.support import optim_remote

NAMES = ["trainer", "healthy", "victim"]
RPC_TIMEOUT = 4.0  # seconds, the group's default RPC timeout


def forward():
    one = torch.tensor(1.0, dtype=torch.float64)
    return sum(rpc.rpc_sync(owner, optim_remote.use_param, args=(one, owner)).sum() for owner in ("healthy", "victim"))


def forward_backward_in(ctx):
    import plugin.autograd

    plugin.autograd.backward(ctx, [forward()])


def healthy_view():
    return {
        # a list, not a tensor: tensors cross a multiprocessing queue by shared memory,
        # which needs the sender alive when the test reads them
        "param": rpc.rpc_sync("healthy", optim_remote.param_value, args=("healthy",)).tolist(),
        "info": rpc.rpc_sync("healthy", optim_remote.optimizer_debug_info),
    }


def _kill_once_healthy_applied(victim_pid, how, result, limit_s=3.0):
    """Stops or kills the victim as soon as the healthy owner's parameter changed (its part
    of the step applied; at most ``limit_s`` after the call)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if rpc.rpc_sync("healthy", optim_remote.param_value, args=("healthy",)).tolist() != result["before"]["param"]:
            break
        time.sleep(0.02)
    os.kill(victim_pid, how)


def force_two_phase_steps(opt):
    """Makes ``opt.step`` take its two phases even where the backward pass checked the
    gradients (what ``tests/conftest.py``'s ``two_phase_steps`` fixture does in the test
    process)."""
    opt._checked_versions = lambda context_id: []


def run_scenario(scenario):
    """``scenario``: what to do. Unprefixed, step() takes its default way after the plugin's
    backward pass: every owner applies at once, as the pass checked the gradients (the checked
    step). Prefixed ``twophase_``: the step takes its two phases (prepare on every owner, then
    commit), as after torch's backward pass or with a Python local optimizer. Prefixed
    ``inbackward_``: backward_and_step, the victim stopped or killed after the forward pass,
    before the call (``_resume``: and resumed once the caller has its error), in smart mode
    (``inbackward_fast_``: fast mode)."""
    import plugin.optim

    two_phase = scenario.startswith("twophase_")
    scenario = scenario[len("twophase_"):] if two_phase else scenario
    in_backward = scenario.startswith("inbackward_")
    scenario = scenario[len("inbackward_"):] if in_backward else scenario
    mode = "fast" if scenario.startswith("fast_") else "smart"
    scenario = scenario[len("fast_"):] if mode == "fast" else scenario

    rrefs = [rpc.rpc_sync(owner, optim_remote.make_param, args=(owner, (1000,), seed)) for seed, owner in enumerate(("healthy", "victim"))]
    opt = plugin.optim.DistributedOptimizer(torch.optim.SGD, rrefs, lr=1.0, momentum=0.9)
    assert set(opt.local_optimizer_kinds.values()) == {"native"}, opt.local_optimizer_kinds
    if two_phase:
        force_two_phase_steps(opt)
    victim_pid = rpc.rpc_sync("victim", os.getpid)
    result = {"before": healthy_view(), "rpc_timeout": RPC_TIMEOUT,
              "victim_before": rpc.rpc_sync("victim", optim_remote.param_value, args=("victim",)).tolist()}
    how = signal.SIGKILL if scenario.startswith("kill") else signal.SIGSTOP
    with dist_autograd.context() as ctx:
        if in_backward:
            loss = forward()
        else:
            forward_backward_in(ctx)
        started = time.monotonic()
        try:
            if in_backward:
                os.kill(victim_pid, how)
                started = time.monotonic()
                opt.backward_and_step(ctx, [loss], mode=mode)
            elif scenario.endswith("before_step"):
                os.kill(victim_pid, how)
                started = time.monotonic()
                opt.step(ctx)
            elif scenario.endswith("mid_commit"):
                # the victim's step waits for its parameter's lock, held there by a thread,
                # once phase 1 has ended on both owners: the healthy owner applies, the
                # victim has not yet when it is stopped or killed
                rpc.rpc_sync("victim", optim_remote.hold_param_lock, args=("victim", 60.0))
                started = time.monotonic()
                fut = opt.step_async(ctx)
                time.sleep(0.5)
                os.kill(victim_pid, how)
                fut.wait()
            elif scenario.endswith("mid_apply"):
                # the same window in a step(): both owners accepted the step (checked by the
                # backward pass, or prepared), the healthy owner applied, the victim waits for
                # its lock when it is stopped or killed
                rpc.rpc_sync("victim", optim_remote.hold_param_lock, args=("victim", 60.0))
                threading.Thread(target=_kill_once_healthy_applied, args=(victim_pid, how, result), daemon=True).start()
                started = time.monotonic()
                opt.step(ctx)
            elif scenario.endswith("state_dict"):
                os.kill(victim_pid, how)
                started = time.monotonic()
                opt.state_dict()
            result["error"] = None
        except Exception as e:  # noqa: BLE001 (reported)
            result["error"] = f"{type(e).__name__}: {e}"
            result["notes"] = list(getattr(e, "__notes__", []))
        result["elapsed"] = time.monotonic() - started
        if "resume" in scenario:
            # the victim wakes up with the step's RPC waiting: past its deadline, it must not apply
            os.kill(victim_pid, signal.SIGCONT)
            time.sleep(1.0)
            result["victim_after"] = rpc.rpc_sync("victim", optim_remote.param_value, args=("victim",)).tolist()
    time.sleep(0.5)  # let the healthy owner handle the drop of its prepared step, if any
    result["after"] = healthy_view()
    return result


def serve(rank, port, scenario, queue):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    warnings.simplefilter("ignore", DeprecationWarning)
    import plugin  # noqa: F401
    import plugin.optim
    import plugin.rpc

    plugin.rpc.init_rpc(rank=rank, world_size=len(NAMES), master_port=port, worker_names=NAMES,
                        num_worker_threads=4, rpc_timeout=RPC_TIMEOUT)
    if rank != 0:
        threading.Event().wait()  # serves until the test kills it
    try:
        queue.put(run_scenario(scenario))
    except BaseException:  # noqa: BLE001 (the test shows it)
        queue.put({"crash": traceback.format_exc()})
    queue.close()
    queue.join_thread()  # flushed before the hard exit
    os._exit(0)  # no shutdown: a peer is dead or stopped
