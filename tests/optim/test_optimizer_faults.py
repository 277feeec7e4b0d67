"""The distributed optimizer when an owner dies (SIGKILL) or freezes (SIGSTOP) mid-call.

Each scenario runs in a fresh group of real processes (tests/support/optim_faults.py), with
an RPC timeout of 4 s; every process is killed at the end, and no scenario runs longer
than a minute.
"""
import multiprocessing
import os
import queue as queue_module
import signal

import pytest
import torch

from tests.support import optim_faults
from tests.support.cluster import free_port

LIMIT_S = 60


def run(scenario):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=optim_faults.serve, args=(rank, port, scenario, queue), daemon=True)
             for rank in range(len(optim_faults.NAMES))]
    for p in procs:
        p.start()
    try:
        result = queue.get(timeout=LIMIT_S)
    except queue_module.Empty:
        pytest.fail(f"scenario {scenario} did not report within {LIMIT_S} s")
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.join(timeout=10)
    assert "crash" not in result, result.get("crash")
    return result


def unchanged(result):
    return result["before"]["param"] == result["after"]["param"]


def applied_once(result):
    """The healthy owner's parameter took exactly one step (SGD, lr=1, momentum's first
    step, a gradient of ones: minus 1)."""
    before, after = (torch.tensor(result[k]["param"], dtype=torch.float64) for k in ("before", "after"))
    return torch.allclose(after, before - 1.0, rtol=0, atol=1e-12)


APPLIED_ON_HEALTHY = "applied on owners ['healthy'] and not confirmed on ['victim']"


def lost_as(how):
    """How the caller's error says the victim was lost: frozen (SIGSTOP) or dead (SIGKILL)."""
    return "no answer within the RPC timeout" if how == "stop" else "connection to it was lost"


def assert_victim_named_in_time(result, *phrases):
    """The call raised within 1.2 times the RPC timeout, naming the victim and saying each of
    ``phrases``."""
    error = result["error"]
    assert error is not None, result
    for phrase in ("failed on owner 'victim'",) + phrases:
        assert phrase in error, (phrase, error)
    assert result["elapsed"] < 1.2 * result["rpc_timeout"], result["elapsed"]


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_owner_lost_before_a_two_phase_step_changes_no_owner(how):
    """A step that validates on the owners first (after torch's backward pass, or with a
    Python local optimizer): the two phases, prepare then commit."""
    r = run(f"twophase_{how}_before_step")
    assert_victim_named_in_time(r, "step(", "no owner applied the step", lost_as(how))
    assert unchanged(r)  # prepared, then dropped
    assert r["after"]["info"]["num_prepared_steps"] == 0


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_owner_lost_before_a_checked_step_is_named_with_the_owners_that_applied(how):
    """The default step after the plugin's backward pass: the pass checked both owners'
    gradients, so the step goes to both at once and the healthy owner applies. The error names
    the victim and says that the healthy owner applied (an owner lost between the phases)."""
    r = run(f"{how}_before_step")
    assert_victim_named_in_time(r, "step(", APPLIED_ON_HEALTHY, lost_as(how))
    assert applied_once(r)


def test_owner_frozen_past_the_deadline_of_a_checked_step_applies_nothing_when_it_resumes():
    """The default step after the plugin's backward pass, the victim frozen when it is sent
    and resumed after the caller got its error: the healthy owner applied (the error says so);
    the victim finds the step past its deadline and applies nothing."""
    r = run("stop_resume_before_step")
    assert_victim_named_in_time(r, APPLIED_ON_HEALTHY, "may have applied it before its deadline")
    assert applied_once(r)
    assert r["victim_after"] == r["victim_before"]


def test_owner_frozen_in_phase_one_applies_nothing_when_it_resumes():
    """A two-phase step, the victim frozen when phase 1 is sent and resumed after the caller
    got its error: the caller dropped the healthy owner's prepared step, the victim's late
    phase 1 only parks its gradients (no commit ever comes; the lease forgets them): no owner
    applied."""
    r = run("twophase_stop_resume_before_step")
    assert_victim_named_in_time(r, "no owner applied the step")
    assert unchanged(r)
    assert r["victim_after"] == r["victim_before"]


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_owner_lost_between_the_phases_is_named_with_the_owners_that_applied(how):
    r = run(f"{how}_mid_commit")
    assert_victim_named_in_time(r, APPLIED_ON_HEALTHY)
    assert not unchanged(r)  # the healthy owner applied its part
    assert applied_once(r)


@pytest.mark.parametrize("protocol", ["", "twophase_"])
@pytest.mark.parametrize("how", ["kill", "stop"])
def test_owner_lost_after_every_owner_accepted_a_step_is_named_with_the_owners_that_applied(how, protocol):
    """step() after both owners accepted (checked by the backward pass, or prepared by both in
    phase 1): the healthy owner applied, the victim was waiting for its parameter's lock when
    it died or froze. The error names the victim and says that the healthy owner applied."""
    r = run(f"{protocol}{how}_mid_apply")
    assert_victim_named_in_time(r, "step(", APPLIED_ON_HEALTHY, lost_as(how))
    assert applied_once(r)


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_state_dict_of_a_lost_owner_names_it(how):
    r = run(f"{how}_state_dict")
    assert_victim_named_in_time(r, "state_dict() failed on owner 'victim'")



@pytest.mark.parametrize("mode", ["smart", "fast"])
@pytest.mark.parametrize("how", ["kill", "stop"])
def test_owner_lost_before_backward_and_step_is_named_by_the_pass(how, mode):
    """backward_and_step with the victim dead or frozen after the forward pass: the pass
    raises within 1.1 times the RPC timeout (the engine's bound), naming the victim, with the
    note that owners whose part had ended may have applied. In smart mode none had: the
    engine asks every worker for its reachability table before any gradient leaves, and the
    victim's answer is what fails. In fast mode the gradients go out at once: with the victim
    frozen, the healthy owner's part ends and applies its step once, as the note warns; with
    the victim dead, the send to it fails at once and the abort races the healthy owner's part
    (it applied once, or not at all: never anything else)."""
    r = run(f"inbackward_{mode}_{how}".replace("smart_", ""))
    error = r["error"]
    assert error is not None and error.startswith("BackwardError: Error on Node "), r
    assert "'victim'" in error, error
    assert any("may have applied the step" in note and "'victim'" in note for note in r["notes"]), r["notes"]
    assert r["elapsed"] < 1.2 * r["rpc_timeout"], r["elapsed"]
    if mode == "smart":
        assert unchanged(r)
    elif how == "stop":
        assert applied_once(r)
    else:
        assert unchanged(r) or applied_once(r)


def test_owner_frozen_through_backward_and_step_applies_nothing_when_it_resumes():
    """Fast mode, the victim frozen when its gradients are sent and resumed after the caller
    got its error (about 1.1 times the RPC timeout later): the healthy owner applied; the
    victim's part then either runs past the step's deadline (half the RPC timeout after the
    call) and applies nothing, or is dropped by the pass's abort. Its parameter is unchanged."""
    r = run("inbackward_fast_stop_resume")
    assert r["error"] is not None and "'victim'" in r["error"], r
    assert applied_once(r)
    assert r["victim_after"] == r["victim_before"]
