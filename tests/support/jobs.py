"""The fault and trainer jobs' two halves, written once: a job is a module under tests/support/
run as its own process (``python -m tests.support.<name> ARGS``), so that a scenario may kill or
stop workers (SIGKILL, SIGSTOP) without taking the test process with them.

* In the job: :func:`run_job` starts the job's :class:`~tests.support.cluster.Cluster`, prints
  ``RESULT <json>`` of what the job computed, and ends the process through ``Cluster.abandon``
  (no shutdown: a peer may be dead or stopped), with exit code 1 if the job raised.
* In the test: :func:`job_result` runs the job bounded in time and returns that JSON, failing
  with the job's output if it exited non-zero or printed no result.
"""
import json
import os
import subprocess
import sys
import traceback
from typing import Any, Callable, Sequence

from tests.support import REPO

PREFIX = "RESULT "


def run_job(cluster, compute: Callable[[], Any], stop: bool = False) -> None:
    """Starts ``cluster``, prints ``RESULT`` and the JSON of ``compute()``, then ends the
    process: with ``stop``, first a clean shutdown of the group (the exit code stays 0 if only
    the shutdown fails), then ``cluster.abandon``. Never returns."""
    code = 0
    try:
        cluster.start()
        print(PREFIX + json.dumps(compute()), flush=True)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 1
    finally:
        if stop and code == 0:
            try:
                cluster.stop()
            except BaseException:  # noqa: BLE001
                pass
        cluster.abandon(code)


def job_result(module: str, args: Sequence[str] = (), timeout_s: float = 120) -> Any:
    """Runs ``python -m tests.support.<module> ARGS`` from the repository root (at most
    ``timeout_s`` seconds) and returns its last ``RESULT`` line's JSON."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", f"tests.support.{module}", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout_s)
    lines = [line for line in done.stdout.splitlines() if line.startswith(PREFIX)]
    assert done.returncode == 0 and lines, (
        f"the job {module} {' '.join(args)} failed (exit code {done.returncode}):\n{done.stdout}\n{done.stderr[-6000:]}")
    return json.loads(lines[-1][len(PREFIX):])
