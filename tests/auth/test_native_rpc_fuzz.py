"""The native RPC functions that take tensors or indices from another worker, fed malformed
requests as any worker could send them (plugin._rpc_functions.call, no caller-side checks):
gradient clipping's _gradient_norms and _scale_gradients, the engine's _receive_gradients
(and _reachability, _abort_pass), and the native local optimizer's _optimizer_* ops. Bounded Hypothesis property tests on the
session's RPC group: every request is answered (a value or an error) and the callee keeps
serving; a refused request changes nothing. Each defect the audit found (requests that ended
or corrupted the callee, or left it unable to step) has its own test below, in a fresh
optimizer, with the smallest request that showed it.
(The lookups' own fuzzing: tests/embedding/test_lookup_fuzz.py.)"""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed.rpc as rpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import native_rpc_remote as remote
from tests.support import optim_remote

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIG = [-1, 0, 2**31, -(2**31), 2**40, -(2**40), 2**62, 2**63 - 1, -(2**63)]
FLOATS = [0.0, 1.0, -1.0, 0.5, 1e30, -1e30, float("nan"), float("inf"), float("-inf")]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.bool, torch.complex64]
FUZZ = settings(max_examples=60, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def target(cluster):
    t = remote.Target("worker1", "audit")
    # an RRef owned by another worker than the callee
    t.elsewhere = rpc.rpc_sync("worker2", optim_remote.make_param, args=("audit_elsewhere", (2, 2), 5, torch.float32))
    yield t
    t.release()


@st.composite
def tensors(draw, shapes, dtypes=DTYPES, sparse=True):
    """A tensor of one of `shapes` and `dtypes`, filled with one value (extremes included),
    dense or (valid) sparse COO."""
    shape = draw(st.sampled_from(shapes))
    t = torch.full(shape, draw(st.sampled_from(FLOATS))).to(draw(st.sampled_from(dtypes)))
    if sparse and len(shape) > 0 and draw(st.booleans()):
        t = t.to_sparse()
    return t


def outcome(future):
    """The future's value, or the exception it completed with (it must complete)."""
    try:
        return future.wait()
    except Exception as error:  # noqa: BLE001
        return error


def gradients(target):
    return rpc.rpc_sync(target.owner, optim_remote.context_gradients,
                        args=(target.context_id, [target.dense_name, target.table_name]))


def same(a, b):
    return all((x is None and y is None) or (x is not None and y is not None and torch.equal(
        x.to_dense() if x.is_sparse else x, y.to_dense() if y.is_sparse else y)) for x, y in zip(a, b))


def assert_serves(target):
    assert target.alive(), "the callee stopped answering"


# --- gradient clipping -------------------------------------------------------------------------


@pytest.mark.timeout(180)
@FUZZ
@given(data=st.data())
def test_gradient_clipping_answers_every_request_and_refuses_a_bad_coefficient_unchanged(target, data):
    """_gradient_norms and _scale_gradients with any context id, any RRefs (owned by the callee
    or not, repeated), any norm type and any coefficient: answered; a coefficient that is not a
    dense 0-dim floating-point tensor is refused and no gradient changes."""
    context_id = data.draw(st.sampled_from([target.context_id, target.context_id + 1] + BIG))
    params = data.draw(st.lists(st.sampled_from([target.dense, target.table, target.elsewhere]), max_size=3))
    if data.draw(st.booleans()):
        result = outcome(target.call("_gradient_norms", context_id, params, data.draw(st.sampled_from(FLOATS + [2.0, 3.0]))))
        if not isinstance(result, Exception):
            norms, positions = result
            assert norms.dim() == 1 and len(positions) == norms.numel()
    else:
        coefficient = data.draw(tensors([(), (1,), (5,), (4, 5), (0,)]))
        good = coefficient.layout == torch.strided and coefficient.dim() == 0 and coefficient.is_floating_point()
        if good:
            coefficient = torch.tensor(data.draw(st.sampled_from([1.0, 0.5, 2.0])), dtype=coefficient.dtype)
        before = gradients(target)
        result = outcome(target.call("_scale_gradients", context_id, params, coefficient))
        if not good:
            assert isinstance(result, Exception) and "coefficient must be a dense 0-dim floating-point tensor" in str(result)
            assert same(gradients(target), before), "a refused coefficient scaled gradients"
    assert_serves(target)


# --- the engine's gradient handler -------------------------------------------------------------


@pytest.mark.timeout(180)
@FUZZ
@given(data=st.data())
def test_receive_gradients_answers_every_request(target, data):
    """_receive_gradients for the send function of a parameter's answer (or another id), with
    any number of gradients of any shape, dtype and layout (sparse ones well formed), any pass
    id, reached list and steps: answered, and the callee keeps serving."""
    grads = data.draw(st.lists(tensors([remote.TABLE_SHAPE, (7, 3), (3,), ()]), max_size=3))
    result = outcome(target.receive(
        grads,
        message_id=data.draw(st.sampled_from([target.table_message_id, target.table_message_id + 1] + BIG)),
        context_id=data.draw(st.sampled_from([target.context_id, target.context_id + 1] + BIG)),
        pass_id=data.draw(st.sampled_from([None] + BIG)),
        reached=data.draw(st.lists(st.sampled_from(BIG + [target.table_message_id]), max_size=3)),
        steps=data.draw(st.sampled_from([[], [-1], [0, 1], [-1, 1, target.adagrad_handle], [-1, 1, -5],
                                         [-1, 1, 2**62], [2**63 - 1, 1, target.adam_handle, 1, target.adam_handle]])),
        smart=data.draw(st.booleans()),
    ))
    assert result is not None
    assert_serves(target)


@pytest.mark.timeout(120)
@FUZZ
@given(op=st.sampled_from(["_reachability", "_abort_pass"]), context_id=st.sampled_from(BIG), pass_id=st.sampled_from(BIG))
def test_the_engines_other_handlers_answer_any_ids(target, op, context_id, pass_id):
    """_reachability and _abort_pass with any context and pass ids: answered, the callee serving."""
    args = (context_id,) if op == "_reachability" else (context_id, pass_id)
    assert outcome(target.call(op, *args)) is not None
    assert_serves(target)


# --- the native local optimizer ----------------------------------------------------------------
# Its steps are native RPC functions (_optimizer_step, _prepare, _commit, _drop); its state and
# values are read and changed in Python on the owner, through functional_optim's checks (the
# owner's _optimizer_state / _load_state / _set_group, plugin/optim/_local.py), fuzzed here too:
# a refusal there must change nothing either.

STATE_KEYS = ["step", "exp_avg", "exp_avg_sq", "sum", "momentum_buffer", "bogus"]


def owner_of(target, which):
    return {"adam": target.adam, "adagrad": target.adagrad}[which]._owners[target.owner]


def optimizer_values(target, which):
    """Everything a refused call must leave as it was: (state dict, group values)."""
    owner = owner_of(target, which)
    return owner.state().wait(), owner.hyperparameters().wait()


def assert_same_values(a, b):
    (state_a, group_a), (state_b, group_b) = a, b
    assert repr(group_a) == repr(group_b)  # (NaN compares by repr)
    assert repr(state_a["param_groups"]) == repr(state_b["param_groups"])
    assert sorted(state_a["state"]) == sorted(state_b["state"])
    for i, entry in state_a["state"].items():
        assert sorted(entry) == sorted(state_b["state"][i])
        for key, value in entry.items():
            torch.testing.assert_close(value, state_b["state"][i][key], rtol=0, atol=0, equal_nan=True)


def with_state(target, which, state):
    """The optimizer's current state dict with its ``state`` replaced (a torch.optim state dict)."""
    current, _ = optimizer_values(target, which)
    return {"state": state, "param_groups": current["param_groups"]}


@st.composite
def state_dicts(draw, shape):
    """A state dict's ``state`` for a parameter of `shape`: indices, keys, and tensors of any
    shape, dtype and layout."""
    state = {}
    for index in draw(st.lists(st.sampled_from([0, 1, -1, 2**40]), max_size=2, unique=True)):
        entry = {}
        for key in draw(st.lists(st.sampled_from(STATE_KEYS), max_size=3, unique=True)):
            entry[key] = draw(tensors([shape, (1,), (2, 2), ()]))
        state[index] = entry
    return state


HPARAMS = st.dictionaries(st.sampled_from(["lr", "eps", "beta1", "beta2", "weight_decay", "lr_decay", "bogus"]),
                          st.sampled_from(FLOATS), max_size=3)
OPTIONS = st.dictionaries(st.sampled_from(["maximize", "foreach", "fused", "amsgrad", "bogus"]),
                          st.sampled_from([True, False, None]), max_size=3)


@pytest.mark.timeout(240)
@FUZZ
@given(data=st.data())
def test_optimizer_ops_answer_every_request_and_a_refusal_changes_nothing(target, data):
    """Every native _optimizer_* RPC function, with handles, context ids, tokens, versions,
    deadlines and leases at the extremes: answered; a state dict or group values of any form,
    loaded or set through the owner: a refusal leaves the optimizer's state and values as they
    were; the callee keeps serving and its optimizers keep answering steps."""
    handles = {"adam": target.adam_handle, "adagrad": target.adagrad_handle}
    which = data.draw(st.sampled_from(["adam", "adagrad"]))
    handle = data.draw(st.sampled_from([handles[which]] * 3 + BIG))
    shape = remote.DENSE_SHAPE if which == "adam" else remote.TABLE_SHAPE
    context_id = data.draw(st.sampled_from([target.context_id, target.receive_context_id] + BIG))
    op = data.draw(st.sampled_from(["step", "prepare", "commit", "drop", "load_state", "set_group"]))
    before = optimizer_values(target, which)
    if op in ("load_state", "set_group"):
        owner = owner_of(target, which)
        if op == "load_state":
            result = outcome(owner.load_state(with_state(target, which, data.draw(state_dicts(shape)))))
        else:
            result = outcome(owner.set_group(data.draw(HPARAMS), data.draw(OPTIONS)))
        if isinstance(result, Exception):
            assert_same_values(optimizer_values(target, which), before)
    else:
        args = {
            "step": lambda: (handle, context_id, data.draw(st.sampled_from([-1] + BIG)),
                             data.draw(st.sampled_from(BIG))),
            "prepare": lambda: (handle, context_id, data.draw(st.sampled_from([-1, 0, 1, 1000, 2**31, 2**40, 2**62]))),
            "commit": lambda: (handle, data.draw(st.sampled_from(BIG)), data.draw(st.sampled_from(BIG))),
            "drop": lambda: (handle, data.draw(st.sampled_from(BIG))),
        }[op]()
        result = outcome(target.call("_optimizer_" + op, *args))
        if op == "prepare" and not isinstance(result, Exception):
            target.call("_optimizer_drop", handle, result).wait()
    assert_serves(target)
    target.steps_still_work()  # (they may refuse what was loaded; they must not end the callee)
    assert_serves(target)


# --- defects found by the audit, each fixed ------------------------------------------------
# Each test shows one defect with the smallest request; each has its own parameters and
# optimizers (a Target), which nothing else touches afterwards.


@pytest.fixture
def fresh(cluster, request):
    t = remote.Target("worker1", "audit_" + request.node.name[-40:].replace("[", "_").replace("]", ""))
    yield t
    t.release()


@pytest.mark.timeout(120)
def test_receive_gradients_refuses_a_sparse_gradient_outside_its_parameter(fresh):
    bad = remote.unsafe_sparse([[0, 10**6]], torch.ones(2, 3), remote.TABLE_SHAPE)
    result = outcome(fresh.receive([bad], smart=True))
    assert isinstance(result, Exception), f"accepted: the owner now holds an out-of-range sparse gradient ({result})"
    assert_serves(fresh)


@pytest.mark.timeout(120)
def test_load_state_refuses_a_scalar_for_a_tensor_state(fresh):
    before = optimizer_values(fresh, "adam")
    scalar = {0: {"step": torch.tensor(1.0), "exp_avg": torch.tensor(0.0), "exp_avg_sq": torch.tensor(0.0)}}
    result = outcome(owner_of(fresh, "adam").load_state(with_state(fresh, "adam", scalar)))
    assert isinstance(result, Exception), "accepted: the next step would write past exp_avg's one element"
    assert_same_values(optimizer_values(fresh, "adam"), before)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["scalar_sum", "sparse_exp_avg", "int_step"])
def test_load_state_refuses_state_a_step_cannot_use(fresh, case):
    which, state = {
        "scalar_sum": ("adagrad", {0: {"step": torch.tensor(1.0), "sum": torch.tensor(0.0)}}),
        "sparse_exp_avg": ("adam", {0: {"step": torch.tensor(1.0),
                                        "exp_avg": torch.zeros(remote.DENSE_SHAPE).to_sparse(),
                                        "exp_avg_sq": torch.zeros(remote.DENSE_SHAPE)}}),
        "int_step": ("adam", {0: {"step": torch.tensor(1), "exp_avg": torch.zeros(remote.DENSE_SHAPE),
                                  "exp_avg_sq": torch.zeros(remote.DENSE_SHAPE)}}),
    }[case]
    handle = fresh.adam_handle if which == "adam" else fresh.adagrad_handle
    loaded = outcome(owner_of(fresh, which).load_state(with_state(fresh, which, state)))
    stepped = outcome(fresh.call("_optimizer_step", handle, fresh.context_id, -1, -1))
    assert isinstance(loaded, Exception) or not isinstance(stepped, Exception), (
        f"accepted state with which every step fails: {stepped}")


@pytest.mark.timeout(120)
def test_prepare_refuses_a_lease_it_cannot_represent(fresh):
    result = outcome(fresh.call("_optimizer_prepare", fresh.adagrad_handle, fresh.context_id, 2**62))
    if not isinstance(result, Exception):
        fresh.call("_optimizer_drop", fresh.adagrad_handle, result).wait()
    assert isinstance(result, Exception), "a lease of 2**62 ms was accepted"


@pytest.mark.timeout(120)
def test_a_commit_with_another_optimizers_handle_leaves_the_step_to_its_own(fresh):
    token = fresh.call("_optimizer_prepare", fresh.adagrad_handle, fresh.context_id, 60_000).wait()
    foreign = outcome(fresh.call("_optimizer_commit", fresh.adam_handle, token, -1))
    assert fresh.call("_optimizer_drop", fresh.adam_handle, token).wait() is False
    own = outcome(fresh.call("_optimizer_commit", fresh.adagrad_handle, token, -1))
    assert isinstance(foreign, Exception)
    assert not isinstance(own, Exception), f"the optimizer's own commit failed: {own}"
