"""A remote module's owner orders its CUDA streams: a snapshot, a buffer update or a step's
parameter writes made on one stream come before what reads them on another
(plugin/csrc/stream_order.h). Skipped without CUDA; the job is tests/support/nn_stream_job.py."""
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.support import REPO

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_snapshots_buffers_and_steps_on_other_streams_are_ordered():
    job = os.path.join(REPO, "tests", "support", "nn_stream_job.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, job], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"outputs_close": [True, True, True], "running_stats_close": True, "params_close": True,
                      "snapshots": 2}, report
