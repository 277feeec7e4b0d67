"""Fuzzing the remote modules' forward (plugin.nn) with Hypothesis on a real RPC group: random
requests sent to the owner's op as any worker could (handles, context and message ids with
extremes, any number of inputs of any dtype, rank, size, layout (sparse, nested) and stride, row ids out of an
embedding's range, requires-grad flags of any length) and through RemoteModule.forward. Each
answer equals the module's eager forward when the request keeps every rule, and is an error of
the forward's own checks (or of the operator that meets a bad value) when it breaks one; the
owner answers a valid forward after each example. A second test sends the requests in a real
context with a real autograd_message_id: a valid one is recorded, a refused or failed one leaves no
context behind on the owner once the caller's is released."""
import warnings

import pytest
import torch
import torch.distributed.rpc as rpc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from plugin import _rpc_functions
from plugin.nn import RemoteModule
from tests.support import nn_modules as mods

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.float16]
EXTREME_IDS = [-1, 10, 2**31, -(2**63), 2**63 - 1]
# ids no worker of the group made (a negative one, or one naming a worker id the group does not have)
BAD_IDS = [-2, -(2**63), 99 << 48, 2**62]
# a request with a nested (jagged) tensor, refused on the caller (the input check refuses one that
# reaches the op: tests/nn/test_remote_module_encoding.py)
NESTED_REFUSED = r"^gilfree_rpc::_remote_forward to 'worker1': argument 3 is or holds a nested tensor \(layout torch\.jagged\)"


@pytest.fixture(scope="module")
def fuzzed(cluster):
    remote = RemoteModule("worker1/cpu", mods.Fuzzed, example_inputs=(torch.randn(3, 6), torch.tensor([1, 2, 3])))
    twin = mods.Fuzzed()
    twin.load_state_dict(rpc.rpc_sync("worker1", mods.state, args=(remote.module_rref,)))
    return remote, twin


@st.composite
def requests(draw):
    """(handle kind, context id, message id, inputs, requires_grad flags, valid)."""
    batch = draw(st.integers(2, 5))
    x = {"dtype": torch.float32, "shape": [batch, 6], "layout": "dense", "stride": "contiguous"}
    ids = {"dtype": torch.int64, "shape": [batch], "layout": "dense", "stride": "contiguous",
           "values": draw(st.lists(st.integers(0, 9), min_size=batch, max_size=batch))}
    specs = [x, ids]
    handle, context_id, message_id = "valid", -1, -1
    flags = [False, False]
    for _ in range(draw(st.integers(0, 2))):
        what = draw(st.sampled_from(["handle", "context", "message", "count", "dtype", "rank", "size", "tie", "layout",
                                     "stride", "value", "flags", "grad_int"]))
        i = draw(st.integers(0, 1))
        if what == "handle":
            handle = draw(st.sampled_from(["unknown", "negative", "huge"]))
        elif what == "context":
            context_id = draw(st.sampled_from(BAD_IDS))
        elif what == "message":
            # (and ids a worker made, sent without a context or with no input requiring grad)
            message_id = draw(st.sampled_from(BAD_IDS + [12345, 1 << 48]))
        elif what == "count":
            specs = specs[: draw(st.integers(0, 1))] if draw(st.booleans()) else specs + [dict(x)]
            flags = [False] * len(specs)
        elif what == "dtype" and i < len(specs):
            specs[i] = dict(specs[i], dtype=draw(st.sampled_from(DTYPES)))
        elif what == "rank" and i < len(specs):
            shape = specs[i]["shape"]
            specs[i] = dict(specs[i], shape=shape[:-1] if draw(st.booleans()) else shape + [1])
        elif what == "size" and i < len(specs):
            shape = list(specs[i]["shape"])
            d = draw(st.integers(0, len(shape) - 1))
            shape[d] = draw(st.sampled_from([0, 1, 7, shape[d] + 1]))
            specs[i] = dict(specs[i], shape=shape)
        elif what == "tie" and len(specs) > 1:
            specs[1] = dict(specs[1], shape=[batch + 1], values=specs[1]["values"] + [0])
        elif what == "layout" and i < len(specs):
            specs[i] = dict(specs[i], layout=draw(st.sampled_from(["sparse", "nested"])))
        elif what == "stride" and i < len(specs):
            specs[i] = dict(specs[i], stride=draw(st.sampled_from(["transposed", "expanded"])))
        elif what == "value" and len(specs) > 1:
            values = list(specs[1]["values"])
            values[draw(st.integers(0, len(values) - 1))] = draw(st.sampled_from(EXTREME_IDS))
            specs[1] = dict(specs[1], values=values)
        elif what == "flags":
            flags = flags + [False] if draw(st.booleans()) else flags[:-1]
        elif what == "grad_int":
            flags = [False, True] + flags[2:]
    return handle, context_id, message_id, specs, flags


def build(spec):
    shape = spec["shape"]
    if "values" in spec and len(spec["values"]) == (shape[0] if shape else 0) and len(shape) == 1:
        t = torch.tensor(spec["values"], dtype=torch.int64)
    else:
        t = torch.arange(int(torch.tensor(shape).prod().item()) if shape else 1).reshape(shape) % 7
    t = t.to(spec["dtype"]) if spec["dtype"] != torch.bool else (t > 2)
    if spec["stride"] == "transposed" and t.dim() >= 2:
        t = t.t().contiguous().t()
    elif spec["stride"] == "expanded" and t.dim() >= 1 and t.shape[0] > 0:
        t = t[:1].expand(t.shape)
    if spec["layout"] == "sparse":
        t = t.to_sparse()
    elif spec["layout"] == "nested":  # a jagged tensor (B=2, j1) of the spec's dtype
        t = torch.nested.nested_tensor([t.reshape(-1), t.reshape(-1)], layout=torch.jagged)
    return t


def valid(handle, context_id, message_id, specs, flags):
    """The forward's rules, written from its documentation."""
    if handle != "valid" or context_id != -1 or message_id != -1 or len(specs) != 2 or len(flags) != 2 or any(flags):
        return False
    x, ids = specs
    if x["layout"] != "dense" or ids["layout"] != "dense":
        return False
    # an expanded tensor (stride 0 over more than one row) overlaps itself: refused
    if any(s["stride"] == "expanded" and s["shape"] and s["shape"][0] > 1 and 0 not in s["shape"] for s in specs):
        return False
    if x["dtype"] != torch.float32 or ids["dtype"] != torch.int64:
        return False
    if len(x["shape"]) != 2 or len(ids["shape"]) != 1 or x["shape"][1] != 6:
        return False
    if x["shape"][0] != ids["shape"][0]:  # any batch: 0 and 1 too (exported size-obliviously)
        return False
    return True


def in_range(specs):
    values = specs[1].get("values", []) if len(specs) > 1 else []
    return all(0 <= v < 10 for v in values)


@pytest.mark.timeout(240)
@settings(max_examples=120, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(request=requests())
def test_a_forward_answers_as_eager_or_is_refused_and_the_owner_survives(fuzzed, request):
    remote, twin = fuzzed
    handle_kind, context_id, message_id, specs, flags = request
    handle = {"valid": remote._handle, "unknown": 424242, "negative": -1, "huge": 2**62}[handle_kind]
    inputs = [build(s) for s in specs]
    ok = valid(*request)
    event("valid" if ok and in_range(specs) else "bad value" if ok else "invalid")

    if any(t.is_nested for t in inputs):
        # torch's RPC cannot send a nested tensor (its serializer aborts the caller): refused here
        assert not ok
        with pytest.raises(ValueError, match=NESTED_REFUSED):
            _rpc_functions.call("worker1", "_remote_forward", (handle, context_id, message_id, inputs, flags, False))
    else:
        raw = _rpc_functions.call("worker1", "_remote_forward", (handle, context_id, message_id, inputs, flags, False))
        try:
            outputs, requires_grad, answer_id = raw.wait()
            assert ok and in_range(specs), f"the owner answered a bad request: {request}"
            assert answer_id == -1 and requires_grad == [False]
            torch.testing.assert_close(outputs[0], twin(*inputs).detach())
        except RuntimeError as error:
            text = str(error)
            assert not (ok and in_range(specs)), f"the owner refused a valid request {request}: {error}"
            if ok:  # only a row id out of range: the embedding's own error, with its node
                assert "index out of range" in text.lower() and "node embedding" in text, text
            else:  # the forward's own checks, before any operator ran
                assert "remote_forward" in text and "node " not in text, f"not refused by the forward's checks: {error}"

    # the public call: the same request's tensors answered as eager answers them, or refused as
    # eager refuses them, naming the owner (a call of other dtypes or ranks than the example's is
    # another program, exported at its first call, or the Python path past the bound or where
    # torch.export refuses it)
    if len(inputs) == 2:
        try:
            want = twin(*inputs).detach()
        except Exception as error:  # noqa: BLE001 (eager's refusal: the remote call must refuse too)
            want = error
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out = remote(*inputs)
            except (RuntimeError, ValueError, TypeError, IndexError) as error:
                good = valid("valid", -1, -1, specs, [False, False]) and in_range(specs)
                assert not good, f"RemoteModule.forward refused a valid request {request}: {error}"
                assert "RemoteModule" in str(error) and "'worker1'" in str(error), error
            else:
                assert not isinstance(want, Exception), f"RemoteModule.forward answered what eager refuses: {request}"
                torch.testing.assert_close(out, want)

    # the owner still serves
    x, ids = torch.randn(2, 6), torch.tensor([3, 4])
    torch.testing.assert_close(remote(x, ids), twin(x, ids).detach())


@pytest.mark.timeout(240)
@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(request=requests())
def test_a_recorded_forward_is_recorded_or_leaves_nothing(fuzzed, request):
    """The request's tensors sent to the owner's op in a live context with an autograd_message_id made here
    (x requiring grad): a valid request is answered with its output requiring grad and a message
    id; any other is refused or fails; either way the owner knows no context of ours once the
    caller's context is released (the caller's release reaches it: it knows the owner)."""
    import time

    import torch.distributed.autograd as dist_autograd
    from plugin import ops

    remote, twin = fuzzed
    _, _, _, specs, _ = request
    inputs = [build(s) for s in specs]
    flags = [i == 0 and t.is_floating_point() for i, t in enumerate(inputs)]
    ok = valid("valid", -1, -1, specs, [False] * len(specs)) and in_range(specs)
    owner = rpc.get_worker_info("worker1").id
    with dist_autograd.context() as ctx:
        _, autograd_message_id = ops._begin_call("fuzz", ctx, owner, flags)
        if any(t.is_nested for t in inputs):
            assert not ok
            with pytest.raises(ValueError, match=NESTED_REFUSED):  # (as in the test above)
                _rpc_functions.call("worker1", "_remote_forward", (remote._handle, ctx, autograd_message_id, inputs, flags,
                                                                   False))
        else:
            answer = _rpc_functions.call("worker1", "_remote_forward", (remote._handle, ctx, autograd_message_id, inputs,
                                                                        flags, False))
            try:
                outputs, requires_grad, answer_id = answer.wait()
                assert ok, f"the owner answered a bad request: {request}"
                assert answer_id >= 0 and requires_grad == [True], (answer_id, requires_grad)
                torch.testing.assert_close(outputs[0], twin(*inputs).detach())
            except RuntimeError as error:
                assert not ok, f"the owner refused a valid request {request}: {error}"
    deadline = time.monotonic() + 10
    while rpc.rpc_sync("worker1", mods.has_context, args=(ctx,)):
        assert time.monotonic() < deadline, f"the owner kept context {ctx} after the caller released it"
        time.sleep(0.05)
