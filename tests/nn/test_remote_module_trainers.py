"""plugin.nn.RemoteModule under several trainers (the parameter-server pattern), on a real RPC
group of six workers in a process of its own (tests/support/nn_trainer_jobs.py): trainer A (its
worker0), the owner (worker1) and four trainers. A backward pass computes the gradients at the
weights its own forward used, whatever steps came between (the stale case, directly, with both
engines and both kinds of owner step); four trainers train one module written as for local
training (no weight clones) without autograd's in-place error; a forward never reads half a
step; concurrent forwards' buffer updates all land."""

import pytest

from tests.support.jobs import job_result

TOL = 1e-6


@pytest.fixture(scope="module")
def job():
    return job_result("nn_trainer_jobs", timeout_s=400)


@pytest.mark.timeout(450)
@pytest.mark.parametrize("engine", ["plugin", "torch"])
@pytest.mark.parametrize("owner_step", ["native", "python"])
def test_a_backward_uses_the_weights_its_forward_used(job, engine, owner_step):
    """A's forward; B's whole iteration with a large step (the owner's native step, or a step in
    Python: torch.optim's foreach Adam); A's backward: A's output, input gradient and the
    parameters' gradients in A's context equal eager's at the weights A's forward saw (1e-6), not
    at the new ones; the next forward equals eager's at the new weights."""
    r = job["stale"][f"{engine}-{owner_step}"]
    assert r["step_changed_weights"] > 1e-3, r
    assert r["out"] <= TOL and r["input_grad"] <= TOL and r["param_grads"] <= TOL, r
    assert r["next_forward"] <= TOL, r


@pytest.mark.timeout(450)
def test_four_trainers_train_one_module(job):
    """Four trainers, each with its own DistributedOptimizer (Adam) and data, train one module
    (no weight clones) at the same time: no error, every loss finite, the loss falls by half;
    every forward ran natively, and the owner took at most one snapshot per step."""
    r = job["four_trainers"]
    losses = r["losses"]
    assert all(all(x == x and abs(x) != float("inf") for x in trainer) for trainer in losses), losses
    first = sum(sum(trainer[:5]) for trainer in losses)
    last = sum(sum(trainer[-5:]) for trainer in losses)
    assert last < 0.5 * first, losses
    assert r["info"]["forwards"] == 4 * r["steps"], r["info"]
    assert 1 <= r["info"]["snapshots"] <= 4 * r["steps"] + 1, r["info"]


@pytest.mark.timeout(450)
def test_a_forward_never_reads_half_a_step(job):
    """A writer on the owner sets every parameter to one value at a time, holding the parameters'
    locks and pausing between parameters; forwards sent meanwhile from two threads each see one
    value in every parameter (an output of that value's form), never a mix."""
    r = job["half_steps"]
    assert r["writes"] == 8 and r["forwards"] >= 8 and r["values_seen"] >= 2, r  # the forwards overlapped the writes
    assert r["mixed"] == 0 and r["foreign"] == [], r


@pytest.mark.timeout(450)
def test_buffer_updates_of_concurrent_forwards_do_not_race(job):
    """Four trainers run train-mode forwards of a module with BatchNorm at the same time (and of
    one that applies its BatchNorm twice, whose second update reads the first's result): every
    update of the running statistics lands (num_batches_tracked counts them all), and the
    statistics stay finite, the variance positive."""
    for name, per_forward in (("ConvNet", 1), ("DoubleNorm", 2)):  # DoubleNorm applies its BatchNorm twice
        r = job["racing_buffers"][name]
        assert r["forwards"] == 100 and r["num_batches_tracked"] == 100 * per_forward, (name, r)
        assert r["finite"] and r["variance_positive"], (name, r)
