"""Worker-side helpers for the profiler tests: torch's server-process global profiler
(``torch.distributed.rpc._server_process_global_profile``, what torch's own
``test_server_process_global_profiler`` uses), started and stopped by RPC, and torch's
``test_dist_autograd_profiling`` run by any worker."""
from typing import Dict, List

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin

_PROFILES: List[rpc._server_process_global_profile] = []


def start_server_profile() -> None:
    profile = rpc._server_process_global_profile()
    profile.__enter__()
    _PROFILES.append(profile)


def stop_server_profile() -> List[str]:
    """Stops the profile started last and returns the names of its events."""
    profile = _PROFILES.pop()
    profile.__exit__(None, None, None)
    return [event.name for event in profile.function_events]


def dist_autograd_profiling(engine: str) -> Dict[str, float]:
    """torch's ``test_dist_autograd_profiling`` on this worker, with ``engine`` ("torch" or
    "plugin"): a remote add on the next worker, backward under
    ``torch.autograd.profiler.profile``. Returns the counts and CPU totals the test checks."""
    infos = sorted(rpc._get_current_rpc_agent().get_worker_infos(), key=lambda info: info.id)
    me = rpc.get_worker_info().id
    next_worker = infos[(me + 1) % len(infos)].name
    with dist_autograd.context() as context_id:
        t1 = torch.rand(3, 3, requires_grad=True)
        t2 = torch.rand(3, 3, requires_grad=True)
        loss = rpc.rpc_sync(next_worker, torch.add, args=(t1, t2)).sum()
        with torch.autograd.profiler.profile() as p:
            if engine == "torch":
                dist_autograd.backward(context_id, [loss])
            else:
                plugin.autograd.backward(context_id, [loss])
    function_events = p.function_events

    def get_event(partial_key):
        return next(event for event in function_events if partial_key in event.name)

    send_event = get_event("SendRpcBackward")
    recv_event = get_event("RecvRpcBackward")
    backward_event = get_event("torch::distributed::autograd::backward")
    return {
        "send_count": send_event.count,
        "recv_count": recv_event.count,
        "backward_cpu_total": backward_event.cpu_time_total,
        "send_cpu_total": send_event.cpu_time_total,
        "recv_cpu_total": recv_event.cpu_time_total,
    }
