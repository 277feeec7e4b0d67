"""A Python hook that raises inside the plugin's engine reaches the caller under torch's error
contract (a RuntimeError whose message is "Error on Node <n>: " and the hook's own message),
naming the worker, the hook's exception type and the node; on the worker that called backward,
the hook's exception itself is the error's ``__cause__``."""
import re

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

from tests.support import graphs
import plugin

TYPE_NAMES = {"value": "ValueError", "key": "KeyError", "custom": "HookError"}


def torch_error(run):
    with pytest.raises(Exception) as info:
        run()
    return info.value


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["value", "key", "custom"])
@pytest.mark.parametrize("thread", ["caller", "rpc"])
def test_local_hook_error_follows_torchs_contract_and_keeps_the_original(cluster, kind, thread):
    """A tensor hook on worker0 (the caller) raising: run by the calling thread (a hook on an
    intermediate tensor), or by the RPC thread that brings the gradient back from worker1 (a
    hook on a leaf sent there). The hook's exception, the one torch's local autograd raises for
    the same hook, is the BackwardError's __cause__."""
    text = f"local {kind} hook failed ({thread} thread)"
    with dist_autograd.context() as ctx:
        a = torch.rand(3, requires_grad=True)
        if thread == "caller":
            y = a * 2
            y.register_hook(graphs.raising_hook(kind, text))
            node = "MulBackward0"
        else:
            a.register_hook(graphs.raising_hook(kind, text))
            y = rpc.rpc_sync("worker1", torch.mul, args=(a, a))
            node = "torch::autograd::AccumulateGrad"
        with pytest.raises(plugin.autograd.BackwardError) as info:
            plugin.autograd.backward(ctx, [y.sum()], retain_graph=True)
    error = info.value
    hook_text = str(graphs.HOOK_ERRORS[kind](text))  # KeyError's str() quotes its argument
    assert str(error) == (
        f"Error on Node 0: {hook_text} [{TYPE_NAMES[kind]} raised by a Python hook while running {node} on "
        f"worker 'worker0' (id 0), in the backward pass of context {ctx}]"
    )
    assert (error.worker, error.worker_id, error.context_id, error.error_type) == ("worker0", 0, ctx, TYPE_NAMES[kind])
    assert type(error.__cause__) is graphs.HOOK_ERRORS[kind] and str(error.__cause__) == hook_text
    assert error.__cause__.__traceback__ is not None  # points into the hook
    # torch's local engine raises the hook's own exception for the same hook
    b = torch.rand(3, requires_grad=True)
    z = b * 2
    z.register_hook(graphs.raising_hook(kind, text))
    ref = torch_error(lambda: torch.autograd.backward([z.sum()]))
    assert type(ref) is type(error.__cause__) and str(ref) == hook_text
    assert plugin.debug_info()["num_running_passes"] == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("udf", ["udf_raising_tensor_hook", "udf_raising_prehook"])
@pytest.mark.parametrize("mode", ["fast", "smart"])
def test_remote_hook_error_follows_torchs_contract(cluster, udf, mode):
    """A tensor hook or a pre-hook raising ValueError on worker2: the caller gets a RuntimeError
    with worker2's "Error on Node 2: " and the hook's message, naming ValueError and worker2;
    torch's engine fails on worker2 too."""
    with dist_autograd.context() as ctx:
        a = torch.rand(3, requires_grad=True)
        b = rpc.rpc_sync("worker1", torch.mul, args=(a, a))
        c = rpc.rpc_sync("worker2", getattr(graphs, udf), args=(b, "value", f"{udf} failed on purpose"))
        root = (c * a).sum()
        with pytest.raises(plugin.autograd.BackwardError) as info:
            plugin.autograd.backward(ctx, [root], retain_graph=True, mode=mode)
        error = info.value
        assert re.fullmatch(
            rf"Error on Node 2: {udf} failed on purpose \[ValueError raised by a Python hook while running "
            rf"\w+ on worker 'worker2' \(id 2\), in the backward pass of context {ctx}\]",
            str(error),
        ), str(error)
        assert (error.worker, error.worker_id, error.error_type) == ("worker2", 2, "ValueError")
        assert error.__cause__ is None  # raised in worker2's process
        # torch's engine fails on the same worker, but (torch 2.13) loses the hook's type and
        # message there: "Error on Node 0: Error on Node 2: python_error"
        ref = torch_error(lambda: dist_autograd.backward(ctx, [root], retain_graph=True))
        assert isinstance(ref, RuntimeError) and "Error on Node 2" in str(ref)
    assert all(rpc.rpc_sync(f"worker{i}", graphs.engine_debug_info)["num_running_passes"] == 0 for i in range(4))


@pytest.mark.torchscript
@pytest.mark.timeout(60)
def test_hook_error_under_torchscript_is_a_runtime_error_with_the_message(cluster):
    with dist_autograd.context() as ctx:
        a = torch.rand(3, requires_grad=True)
        y = a * 2
        y.register_hook(graphs.raising_hook("value", "scripted caller"))
        # TorchScript puts its interpreter's traceback before the engine's message
        with pytest.raises(RuntimeError, match=r"\nRuntimeError: Error on Node 0: scripted caller \[ValueError raised by a Python hook"):
            graphs.to_torchscript("scripted_plugin_backward")(ctx, [y.sum()], "smart")
