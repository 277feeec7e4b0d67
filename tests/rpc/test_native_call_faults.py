"""The native calls a backward pass follows, the lookups of plugin.embedding and the forwards of
plugin.nn.RemoteModule, when owners die, freeze, are busy or refuse, and when the caller's
context goes before the answer comes, with real processes: per kind, one fresh RPC group with a
short RPC timeout runs every scenario in order (tests/support/native_call_jobs.py), so that a
broken group cannot affect other tests."""
import re

import pytest

from tests.support.jobs import job_result

RPC_TIMEOUT = 3.0
# Slack for time measured around a call on a shared, loaded machine (as tests/engine/test_faults.py);
# the promise is 1.2 times the RPC timeout.
SLACK_S = 0.6


KINDS = {
    "lookup": {
        "prefix": r"^RuntimeError: lookup_bags_async: the lookup of handles \[\d+, \d+\] failed on owner '{owner}': ",
        "refused": r"RuntimeError: lookup_bags: indices\[1\]: Index 1 of input takes value 9 which is not in the "
                   r"valid range \[0, 8\)$",
        "unknown_handle": r"^RuntimeError: lookup_bags_async: the lookup of handles \[\d+, 424242\] failed on owner "
                          r"'worker1': RuntimeError: lookup_bags: handles\[1\] = 424242 is not a shared table on this "
                          r"worker",
    },
    "forward": {
        "prefix": r"^RuntimeError: RemoteModule.forward: the forward of MLP failed on owner '{owner}': ",
        "refused": r"ValueError: remote_forward of MLP: input x \(inputs\[0\]\) dimension 1 must have size 6 \(fixed "
                   r"when the module was exported\), got 7 \(shape \[3, 7\]\)$",
        # (sent without the RemoteModule: the raw RPC error, the owner's message in it)
        "unknown_handle": r"remote_forward: handle 424242 is not a remote module on this worker \(never registered, or "
                          r"released\)",
    },
}


@pytest.fixture(scope="module", params=sorted(KINDS))
def job(request):
    return dict(job_result("native_call_jobs", (request.param, str(RPC_TIMEOUT)), timeout_s=240),
                kind=KINDS[request.param])


def within_the_timeout(outcome):
    assert outcome["elapsed_s"] < 1.2 * RPC_TIMEOUT + SLACK_S, outcome


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", ["abandoned_frozen", "abandoned"])
def test_abandoned_calls_leave_no_context_on_either_side(job, case):
    """100 calls whose `with dist_autograd.context()` block exits before their answers arrive
    (frozen: the owner is stopped until every context is exited, so no answer comes first): the
    live contexts on the caller and on the owner, torch's and the engine's, are as many as before
    within a bounded wait, none of the 100 ids is known on either side, and each call whose
    answer came after the release completes with an error saying so."""
    result = job[case]
    assert result["after"] == result["before"], result
    assert result["settled_s"] is not None, result
    assert result["known_on_owner"] == 0 and result["known_on_caller"] == 0, result
    outcomes = result["outcomes"]
    assert outcomes["other"] == [] and outcomes["answered"] + outcomes["released_first"] == 100, outcomes
    if case == "abandoned_frozen":
        assert outcomes["released_first"] == 100, outcomes


@pytest.mark.timeout(300)
def test_a_refused_call_names_the_owner_and_the_argument(job):
    """A request only the owner can check (a row out of the table's range; an input of
    another fixed size) and an unknown handle: the owner's refusal, named; the owner then answers a good call."""
    kind = job["kind"]
    outcome = job["refused"]
    refused = (kind["prefix"].format(owner="worker1").replace("^RuntimeError", "^ValueError")
               if kind["refused"].startswith("ValueError") else kind["prefix"].format(owner="worker1"))
    assert re.search(refused + kind["refused"], outcome["error"]), outcome
    within_the_timeout(outcome)
    outcome = job["unknown_handle"]
    assert re.search(kind["unknown_handle"], outcome["error"]), outcome
    within_the_timeout(outcome)
    assert job["serving_after_refusals"]["error"] is None, job["serving_after_refusals"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case,owner", [("busy", "worker3"), ("frozen", "worker1")])
def test_an_owner_that_does_not_answer_is_named_within_the_timeout(job, case, owner):
    """An owner whose RPC threads are all busy, or that is stopped (SIGSTOP): the call fails
    after the RPC timeout, within 1.2 times it, naming the owner."""
    outcome = job[case]
    assert re.search(job["kind"]["prefix"].format(owner=owner) + r"no answer within the RPC timeout \(3000 ms\): the worker is "
                                                  r"frozen, overloaded or unreachable$", outcome["error"]), outcome
    assert outcome["elapsed_s"] > 0.95 * RPC_TIMEOUT, outcome
    within_the_timeout(outcome)


@pytest.mark.timeout(300)
def test_a_killed_owner_is_named_promptly(job):
    """The owner is killed (SIGKILL) while a call waits for it, then a new call is sent:
    both fail within the timeout, naming the owner and the lost connection."""
    for when in ("in_flight", "after"):
        outcome = job["killed"][when]
        assert re.search(job["kind"]["prefix"].format(owner="worker2") + r"the connection to it was lost \(the worker died or closed "
                                                          r"it\): ", outcome["error"]), (when, outcome)
        within_the_timeout(outcome)
