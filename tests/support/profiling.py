"""Worker-side helpers for the profiler tests: torch's server-process global profiler
(``torch.distributed.rpc._server_process_global_profile``, what torch's own
``test_server_process_global_profiler`` uses), started and stopped by RPC."""
from typing import List

import torch.distributed.rpc as rpc

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
