"""Fault scenarios of tests/engine/test_faults.py with a key: the clusters talk over the
authenticating transport (tests/support/cluster.py, GILFREE_TEST_AUTH_KEY), and a worker
that dies is still named promptly (its connections close: the transport's errors read as
TensorPipe's)."""
import os
import re

import pytest

from tests.engine import test_faults
from tests.auth.jobs import KEY
from tests.support.cluster import AUTH_KEY_ENV


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv(AUTH_KEY_ENV, KEY)


@pytest.mark.timeout(150)
def test_killed_server_is_named_promptly_with_a_key(keyed):
    result = test_faults.run_scenario("kill_server", rpc_timeout=10.0)
    assert result["reached_worker2"] and result["finished"]
    error = result["error"]
    assert error is not None and error.startswith("BackwardError: Error on Node "), error
    assert "gilfree_auth" in error, error  # the keyed transport carried the pass
    assert re.search(r" \[sending gradients to worker 'worker2' \(id 2\) failed on worker 'worker\d' \(id \d\), "
                     r"in the backward pass of context \d+\]$", error), error
    assert result["elapsed_s"] < 5.0, result["elapsed_s"]
    assert result["running_passes"] == {"worker1": 0, "worker3": 0} and result["root_running_passes"] == 0


@pytest.mark.timeout(150)
def test_stopped_server_is_named_within_the_timeout_with_a_key(keyed):
    test_faults.test_stopped_server_is_named_within_the_timeout("smart")
    assert os.environ[AUTH_KEY_ENV] == KEY
