"""Errors of the plugin's engine: bad arguments, errors on remote workers, and what is
left behind after them (nothing)."""
import re
import threading

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

from tests.support import graphs
import plugin


def running_passes():
    return {
        info.name: rpc.rpc_sync(info.name, graphs.engine_debug_info)["num_running_passes"]
        for info in rpc._get_current_rpc_agent().get_worker_infos()
    }


def assert_nothing_left_running():
    assert set(running_passes().values()) == {0}


@pytest.mark.parametrize(
    "make_roots, message",
    [
        (lambda a: [a * 2], "is not a scalar, all roots need to be scalar"),
        (lambda a: [a.detach().sum()], "requires_grad not set on root"),
        (lambda a: [a], "is not a scalar, all roots need to be scalar"),
        (lambda a: [torch.ones((), requires_grad=True)], "does not have a valid gradient function"),
        (lambda a: [], "No tensors provided for gradient computation"),
    ],
    ids=["not_scalar", "no_requires_grad", "leaf_vector", "no_grad_fn", "empty"],
)
def test_invalid_roots(cluster, make_roots, message):
    with dist_autograd.context() as ctx:
        a = torch.rand(3, requires_grad=True)
        with pytest.raises(RuntimeError, match=message):
            plugin.autograd.backward(ctx, make_roots(a))
        with pytest.raises(RuntimeError, match=message):  # torch's words
            dist_autograd.backward(ctx, make_roots(a))


def test_unknown_context_id(cluster):
    a = torch.rand(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Could not find autograd context with id: 987654") as theirs:
        dist_autograd.backward(987654, [a.sum()])
    # torch's message right after torch's prefix, then where
    with pytest.raises(RuntimeError) as ours:
        plugin.autograd.backward(987654, [a.sum()])
    torch_message = str(theirs.value).splitlines()[0]  # (torch's has a C++ backtrace after it)
    assert str(ours.value) == (
        f"Error on Node 0: {torch_message} [on worker 'worker0' (id 0), in the backward pass of context 987654]"
    )
    with pytest.raises(RuntimeError, match="Could not find autograd context with id: 987654"):
        plugin.autograd.get_gradients(987654)


@pytest.mark.parametrize(
    "args, message",
    [
        ((None, []), "context_id must be an int, got NoneType"),
        (("1", []), "context_id must be an int, got str"),
        ((1, None), "roots must be a list of Tensors, got NoneType"),
        ((None, None), "context_id must be an int, got NoneType"),
        ((1, "roots"), "roots must be a list of Tensors, got str"),
        ((1, [1.0]), r"roots\[0\] must be a Tensor, got float"),
        ((1, [], 1), "retain_graph must be a bool, got int"),
        ((1, [], None), "retain_graph must be a bool, got NoneType"),
    ],
    ids=["ctx_none", "ctx_str", "roots_none", "both_none", "roots_str", "root_float", "retain_int", "retain_none"],
)
def test_wrong_argument_types_raise_type_error(cluster, args, message):
    """TypeError with torch's (pybind's) "incompatible function arguments", as
    torch.distributed.autograd.backward raises for wrong types, then which argument (where
    torch converts, ``retain_graph=1``, the plugin asks for a bool), before anything runs."""
    with pytest.raises(TypeError, match=f"^backward\\(\\): incompatible function arguments: {message}$"):
        plugin.autograd.backward(*args)
    if "retain_graph" not in message:
        with pytest.raises(TypeError, match="incompatible function arguments"):
            dist_autograd.backward(*args)
    with pytest.raises(
        TypeError, match=r"^get_gradients\(\): incompatible function arguments: context_id must be an int, got str$"
    ):
        plugin.autograd.get_gradients("1")
    with pytest.raises(TypeError, match="incompatible function arguments"):
        dist_autograd.get_gradients("1")


def test_engine_errors_start_like_torchs(cluster):
    """torch's distributed engine raises a RuntimeError whose message has "Error on Node <worker
    id>: " right before the original message; so does the plugin's, on the same failure (a
    backward function raising on worker2), then it says what raised it, where."""
    rpc.rpc_sync("worker2", graphs.set_fail_backward, args=(True,))
    try:
        with dist_autograd.context() as ctx:
            a = torch.rand(3, requires_grad=True)
            c = rpc.rpc_sync("worker2", graphs.udf_failing_backward, args=(a * 1,))
            with pytest.raises(RuntimeError) as torch_error:
                dist_autograd.backward(ctx, [c.sum()], retain_graph=True)
            with pytest.raises(plugin.autograd.BackwardError) as ours:
                plugin.autograd.backward(ctx, [c.sum()], retain_graph=True)
    finally:
        rpc.rpc_sync("worker2", graphs.set_fail_backward, args=(False,))
    # torch: "Error on Node 0: Error on Node 2: boom ..." (one prefix per worker on the way back)
    assert re.match(r"^Error on Node 0: Error on Node 2: boom in FailingBackward", str(torch_error.value))
    # ours: the failing worker's prefix, the message, then where
    assert str(ours.value) == (
        "Error on Node 2: boom in FailingBackward [ValueError raised by a Python autograd.Function while running "
        f"FailingBackwardBackward on worker 'worker2' (id 2), in the backward pass of context {ctx}]"
    )
    error = ours.value
    assert isinstance(error, RuntimeError)
    assert (error.worker, error.worker_id, error.context_id) == ("worker2", 2, ctx)
    assert (error.error_type, error.original_message) == ("ValueError", "boom in FailingBackward")
    assert error.__cause__ is None  # the ValueError lives in worker2's process


def test_invalid_mode(cluster):
    with dist_autograd.context() as ctx:
        a = torch.rand(3, requires_grad=True)
        with pytest.raises(ValueError, match='mode must be "smart" or "fast", got "slow"'):
            plugin.autograd.backward(ctx, [a.sum()], mode="slow")


def test_the_mode_is_checked_once_by_the_op(cluster):
    """The op itself raises the ValueError (no Python check before it), and nothing runs."""
    with dist_autograd.context() as ctx:
        a = torch.rand(3, requires_grad=True)
        with pytest.raises(ValueError, match='^mode must be "smart" or "fast", got "slow"'):
            plugin.ops.backward(ctx, [a.sum()], False, "slow")
        assert plugin.autograd.get_gradients(ctx) == {}


@pytest.mark.torchscript
def test_the_mode_is_checked_by_the_op_under_torchscript(cluster):
    """Called from TorchScript, the op's check of the mode is the one that runs (no Python check
    there): TorchScript's interpreter hands on the op's error as a RuntimeError (as it does for
    every op's ValueError: torch's TorchScript contract), with the same message; nothing runs."""
    with dist_autograd.context() as ctx:
        a = torch.rand(3, requires_grad=True)
        with pytest.raises(RuntimeError, match='mode must be "smart" or "fast", got "slow"') as info:
            graphs.to_torchscript("scripted_plugin_backward")(ctx, [a.sum()], "slow")
        assert not isinstance(info.value, ValueError)  # eager: ValueError (test_invalid_mode)
        assert plugin.autograd.get_gradients(ctx) == {}


def test_the_error_trailer_is_read_in_one_place():
    """The error contract (plugin/csrc/rpc/worker_error.h): the op _error_parts reads the trailer
    of a native op's error as it comes back over RPC and of a backward pass's error; the Python
    decoder rebuilds "<Type>: <message>" from the first and leaves the second alone."""
    from plugin import _errors

    op_error = "RuntimeError: lookup_bags: bad [ValueError raised on worker 'w1' (id 1), in gilfree_rpc::_lookup_bags]\n"
    parts = plugin.ops._error_parts(op_error)
    assert parts == {"message": "RuntimeError: lookup_bags: bad", "origin": "ValueError raised", "type": "ValueError",
                     "worker": "w1", "worker_id": "1", "where": "in gilfree_rpc::_lookup_bags", "at_end": "1"}, parts
    assert _errors.decode_native(op_error) == "ValueError: lookup_bags: bad"
    assert _errors.decode_native("ValueError: x [ValueError raised on worker 'w1' (id 1), in gilfree_rpc::_y]") == \
        "ValueError: x"
    pass_error = ("Error on Node 2: boom [TypeError raised by a Python hook while running MulBackward0 on worker 'w2' "
                  "(id 2), in the backward pass of context 5]")
    parts = plugin.ops._error_parts(pass_error)
    assert (parts["node"], parts["what"], parts["type"], parts["worker"], parts["context_id"]) == (
        "2", "boom", "TypeError", "w2", "5"), parts
    assert _errors.decode_native(pass_error) is None
    assert _errors.parse_pass_error(pass_error) == {
        "node": 2, "what": "boom", "origin": "TypeError raised by a Python hook while running MulBackward0",
        "worker": "w2", "worker_id": 2, "context_id": 5, "error_type": "TypeError"}
    assert _errors.parse_pass_error(pass_error + " and more") is None
    assert plugin.ops._error_parts("no trailer [here]") == {}
    assert plugin.ops._error_parts(op_error + "more")["at_end"] == "0"


def test_second_backward_while_one_runs(cluster):
    with dist_autograd.context() as ctx:
        a = torch.rand(3, requires_grad=True)
        y = rpc.rpc_sync("worker1", graphs.udf_blocking_backward, args=(a,))
        errors = []
        first = threading.Thread(target=lambda: plugin.autograd.backward(ctx, [y.sum()], retain_graph=True))
        first.start()
        try:
            # wait until the first pass is under way on worker1
            for _ in range(300):
                if running_passes()["worker1"]:
                    break
                threading.Event().wait(0.01)
            with pytest.raises(RuntimeError, match=f"a backward pass of context {ctx} is already running"):
                plugin.autograd.backward(ctx, [y.sum()], retain_graph=True)
        finally:
            rpc.rpc_sync("worker1", graphs.release_blocked_backward)
            first.join(timeout=30)
        assert not first.is_alive() and not errors
        torch.testing.assert_close(plugin.autograd.get_gradients(ctx)[a], torch.ones(3))


def gradients_everywhere(ctx):
    return {
        info.name: rpc.rpc_sync(info.name, graphs.collect_gradients, args=(ctx, "plugin"))
        for info in rpc._get_current_rpc_agent().get_worker_infos()
    }


@pytest.mark.parametrize("mode", ["fast", "smart"])
def test_error_on_remote_worker_names_it_and_leaves_nothing_behind(cluster, mode):
    """A backward function raising ValueError on worker2 (reached through worker1): the
    caller gets a RuntimeError with worker2's "Error on Node 2: " and the message, naming worker2; no worker keeps
    the pass or any gradient of it; the context runs backward again."""
    for info in rpc._get_current_rpc_agent().get_worker_infos():
        rpc.rpc_sync(info.name, graphs.clear_leaves)
    rpc.rpc_sync("worker2", graphs.set_fail_backward, args=(True,))
    try:
        with dist_autograd.context() as ctx:
            a = graphs.make_leaf("a", (4,), 1)
            w = rpc.rpc_sync("worker3", graphs.remote_leaf, args=("w", (4,), 2))
            b = rpc.rpc_sync("worker1", torch.mul, args=(a, a))
            c = rpc.rpc_sync("worker2", graphs.udf_failing_backward, args=(b,))
            d = rpc.rpc_sync("worker3", graphs.udf_mul_add, args=(c, a))  # c * a + a
            root = (d * w).sum()
            # torch's contract: a RuntimeError, "Error on Node 2: " and the backward function's
            # message; its type and worker2 named after it
            with pytest.raises(
                plugin.autograd.BackwardError,
                match=r"^Error on Node 2: boom in FailingBackward \[ValueError raised by a Python autograd.Function "
                      r"while running FailingBackwardBackward on worker 'worker2' \(id 2\), in the backward pass of "
                      rf"context {ctx}\]$",
            ):
                plugin.autograd.backward(ctx, [root], retain_graph=True, mode=mode)
            assert_nothing_left_running()
            # parts of the pass that had ended (worker3's, say) were taken back too
            assert gradients_everywhere(ctx) == {f"worker{i}": {} for i in range(4)}

            rpc.rpc_sync("worker2", graphs.set_fail_backward, args=(False,))
            plugin.autograd.backward(ctx, [root], mode=mode)
            grads = plugin.autograd.get_gradients(ctx)
            w_grad = rpc.rpc_sync("worker3", graphs.collect_gradients, args=(ctx, "plugin"))["w"]
        a_, w_ = a.detach(), w.detach()
        # root = sum((2 a^2 * a + a) * w) = sum((2 a^3 + a) w)
        torch.testing.assert_close(grads[a], (6 * a_**2 + 1) * w_, rtol=1e-12, atol=0)
        torch.testing.assert_close(w_grad, 2 * a_**3 + a_, rtol=1e-12, atol=0)
    finally:
        rpc.rpc_sync("worker2", graphs.set_fail_backward, args=(False,))
    assert_nothing_left_running()


def test_error_during_smart_walk_names_worker(cluster):
    """worker2 cannot answer the smart walk in time (all its RPC threads are busy and the
    RPC timeout is 1 s): the caller's error names worker2; nothing is left running."""
    with dist_autograd.context() as ctx:
        a = torch.rand(3, requires_grad=True)
        b = rpc.rpc_sync("worker1", torch.mul, args=(a, a))
        c = rpc.rpc_sync("worker2", torch.add, args=(b, a))
        busy = [rpc.rpc_async("worker2", graphs.sleep, args=(3.0,)) for _ in range(cluster.num_worker_threads)]
        rpc._set_rpc_timeout(1)
        try:
            with pytest.raises(
                RuntimeError,
                match=r"(?s)^Error on Node 0: .*timeout.* \[asking worker 'worker2' \(id 2\) for its reachability "
                      r"table failed on worker 'worker0' \(id 0\), in the backward pass of context \d+\]$",
            ):
                plugin.autograd.backward(ctx, [c.sum()], mode="smart")
        finally:
            rpc._set_rpc_timeout(cluster.rpc_timeout)
            for f in busy:
                f.wait()
        assert_nothing_left_running()
        # once worker2 answers again, the same context runs backward
        plugin.autograd.backward(ctx, [c.sum()], mode="smart")
        torch.testing.assert_close(plugin.autograd.get_gradients(ctx)[a], 2 * a.detach() + 1)


def _raise_key_error() -> None:
    raise KeyError("kaboom")


_RaisesKeyError = graphs.identity_with_backward_action(
    "RaisesKeyError", "Identity whose backward raises a KeyError.", _raise_key_error
)


def test_backward_error_pickles_with_its_attributes(cluster):
    """A BackwardError crosses RPC and processes as a pickle: the copy has the same message and
    attributes (plugin/autograd.py promises it); the original's cause is the hook's exception."""
    import pickle

    x = torch.tensor([1.0], requires_grad=True)
    with dist_autograd.context() as ctx:
        with pytest.raises(plugin.autograd.BackwardError) as raised:
            plugin.autograd.backward(ctx, [_RaisesKeyError.apply(x).sum()])
    error = raised.value
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is plugin.autograd.BackwardError and str(copy) == str(error)
    for name in ("worker", "worker_id", "context_id", "error_type", "original_message"):
        assert getattr(copy, name) == getattr(error, name), name
    assert (error.worker, error.worker_id, error.error_type) == ("worker0", 0, "KeyError")
    assert type(error.__cause__) is KeyError


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_precision_roots_and_a_tuple_of_roots(cluster, dtype):
    """Roots of any floating dtype (the gradients in the root's dtype), and roots given as a
    tuple, whose gradients add up."""
    x = torch.tensor([1.0, 2.0, 3.0], dtype=dtype, requires_grad=True)
    with dist_autograd.context() as ctx:
        plugin.autograd.backward(ctx, ((x * x).sum(), (x * 3).sum()))
        grad = plugin.autograd.get_gradients(ctx)[x]
    assert grad.dtype == dtype and grad.tolist() == [5.0, 7.0, 9.0]
