"""The plugin's calls mixed with torch's own in one distributed autograd context (issue 31, item 4).

A user who migrates one call at a time runs one stack's backward pass and the other's
gradient reader or optimizer in the same context. Each engine keeps its own gradients: torch's
in its DistAutogradContext, the plugin's in its own store per context
(plugin/csrc/engine/context_registry.h). What is promised here, case by case, is either the
result of torch's stack alone (computed on the same parameters in the same run) or an error
that says what to call instead. Never a silent wrong result.

The owners are real worker processes (``cluster``: worker0 is this process, worker1 and
worker2 own the parameters).

What the engine does (plugin/csrc/engine/context_registry.h, gradients.h):

* it publishes the gradients of its passes into torch's own store of the context, so torch's
  ``dist_autograd.get_gradients`` and torch's ``DistributedOptimizer`` see them;
* an owner where the plugin's engine holds no gradient of the context reads torch's, so the
  plugin's step, ``clip_grad_norm_`` and ``get_gradients`` work after torch's pass;
* a plugin pass after a torch pass in one context: torch's readers see the two passes summed;
  the plugin's readers and step raise, naming both calls (the two engines' sums are kept
  apart); a torch pass after a plugin pass adds in place to the gradient the plugin published,
  as torch adds a second pass's, so both stacks read the sum.
"""
import warnings

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
import plugin.autograd
import plugin.optim
from tests.support import optim_remote

OWNERS = {"mix_a": ("worker1", 11), "mix_b": ("worker2", 12)}
LR = 0.5
X = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)

# torch 2.13's torch.distributed.optim scripts its functional optimizers (TorchScript); 2.14 on
# steps them in Python.
TORCH_SCRIPTS_ITS_OPTIMIZER = tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 14)
TORCH_OPTIMIZER_MARKS = [pytest.mark.torchscript] if TORCH_SCRIPTS_ITS_OPTIMIZER else []

# What an error must say to count as the promised one: the call to make instead.
INSTEAD = ("plugin.optim.DistributedOptimizer", "plugin.autograd.get_gradients", "torch.distributed.autograd",
           "dist_autograd.get_gradients")


@pytest.fixture
def params(cluster):
    """Fresh parameters on worker1 and worker2 (float64, 3 elements each), as RRefs."""
    return {name: rpc.rpc_sync(owner, optim_remote.make_param, args=(name, (3,), seed, torch.float64))
            for name, (owner, seed) in OWNERS.items()}


def values():
    return {name: rpc.rpc_sync(owner, optim_remote.param_value, args=(name,)) for name, (owner, _) in OWNERS.items()}


def forward():
    """loss = sum over the owners of sum((X * p)^2) / 2: the gradient of p is X^2 * p."""
    loss = 0
    for name, (owner, _) in OWNERS.items():
        loss = loss + (rpc.rpc_sync(owner, optim_remote.use_param, args=(X, name)) ** 2).sum() / 2
    return loss


def expected_gradients(before, passes=1):
    return {name: passes * X * X * p for name, p in before.items()}


def owner_gradient(context_id, name, engine):
    """Runs on an owner: the gradient of parameter ``name`` in the context, as that engine's
    reader returns it (None when it has none)."""
    grads = dist_autograd.get_gradients(context_id) if engine == "torch" else plugin.autograd.get_gradients(context_id)
    return grads.get(optim_remote.PARAMS[name])


def gradients_on_owners(context_id, engine):
    return {name: rpc.rpc_sync(owner, owner_gradient, args=(context_id, name, engine))
            for name, (owner, _) in OWNERS.items()}


def torch_optimizer(params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 scripts its functional SGD
        from torch.distributed.optim import DistributedOptimizer

        return DistributedOptimizer(torch.optim.SGD, list(params.values()), lr=LR)


def assert_works_or_says_what_to_call(call, check):
    """``call()`` either raises a RuntimeError that names the call to make instead, or returns
    and ``check()`` passes."""
    try:
        call()
    except RuntimeError as error:
        assert any(name in str(error) for name in INSTEAD), f"an error that does not say what to call: {error}"
        return
    check()


# --- (a) the plugin's backward pass, then torch's readers --------------------------------------


@pytest.mark.parametrize("mode", [pytest.param(m, marks=TORCH_OPTIMIZER_MARKS) for m in ("smart", "fast")])
def test_plugin_backward_then_torch_distributed_optimizer_step(params, mode):
    optimizer = torch_optimizer(params)
    before = values()
    with dist_autograd.context() as context_id:
        plugin.autograd.backward(context_id, [forward()], mode=mode)

        def check():
            after = values()
            grads = expected_gradients(before)
            for name in OWNERS:
                assert torch.allclose(after[name], before[name] - LR * grads[name]), (name, before, after)

        assert_works_or_says_what_to_call(lambda: optimizer.step(context_id), check)


def test_plugin_backward_then_torch_get_gradients_on_the_owners(params):
    before = values()
    with dist_autograd.context() as context_id:
        plugin.autograd.backward(context_id, [forward()])
        ours = gradients_on_owners(context_id, "plugin")
        assert all(torch.allclose(ours[n], g) for n, g in expected_gradients(before).items())  # the pass itself

        def check():
            theirs = gradients_on_owners(context_id, "torch")
            assert all(theirs[n] is not None and torch.equal(theirs[n], ours[n]) for n in OWNERS), theirs

        assert_works_or_says_what_to_call(lambda: gradients_on_owners(context_id, "torch"), check)


# --- (b) torch's backward pass, then the plugin's calls ----------------------------------------


def test_torch_backward_then_plugin_distributed_optimizer_step(params):
    """Works today: an owner where the plugin's engine holds no gradient of the context steps
    with torch's (the two-phase step: no pass of the plugin checked them)."""
    optimizer = plugin.optim.DistributedOptimizer(torch.optim.SGD, list(params.values()), lr=LR)
    before = values()
    with dist_autograd.context() as context_id:
        dist_autograd.backward(context_id, [forward()])
        optimizer.step(context_id)
    after, grads = values(), expected_gradients(before)
    for name in OWNERS:
        assert torch.allclose(after[name], before[name] - LR * grads[name]), (name, before, after)


def test_torch_backward_then_plugin_clip_grad_norm(params):
    """Works today: the total norm of torch's gradients, as torch.nn.utils.clip_grad_norm_
    computes it, and the clipped gradients are what the plugin's next step applies."""
    optimizer = plugin.optim.DistributedOptimizer(torch.optim.SGD, list(params.values()), lr=LR)
    before = values()
    grads = expected_gradients(before)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()]))
    max_norm = 0.5 * total.item()
    with dist_autograd.context() as context_id:
        dist_autograd.backward(context_id, [forward()])
        norm = plugin.optim.clip_grad_norm_(context_id, optimizer, max_norm)
        assert torch.allclose(norm, total), (norm, total)
        clipped = gradients_on_owners(context_id, "torch")
        coefficient = max_norm / (total + 1e-6)
        for name in OWNERS:
            assert torch.allclose(clipped[name], coefficient * grads[name]), name
        optimizer.step(context_id)
    after = values()
    for name in OWNERS:
        assert torch.allclose(after[name], before[name] - LR * coefficient * grads[name]), name


@pytest.mark.parametrize("order", ["torch pass first", "plugin pass first"])
def test_both_engines_pass_in_one_context_then_plugin_step(params, order):
    """Two passes in one context (retain_graph=True for the first) add up on either stack alone;
    with one pass of each engine, the plugin's step must apply their sum, or refuse."""
    optimizer = plugin.optim.DistributedOptimizer(torch.optim.SGD, list(params.values()), lr=LR)
    before = values()
    with dist_autograd.context() as context_id:
        loss = forward()
        if order == "torch pass first":
            dist_autograd.backward(context_id, [loss], retain_graph=True)
            plugin.autograd.backward(context_id, [loss])
        else:
            plugin.autograd.backward(context_id, [loss], retain_graph=True)
            dist_autograd.backward(context_id, [loss])

        def check():
            after, grads = values(), expected_gradients(before, passes=2)
            for name in OWNERS:
                assert torch.allclose(after[name], before[name] - LR * grads[name]), (name, before, after)

        assert_works_or_says_what_to_call(lambda: optimizer.step(context_id), check)


def test_torch_backward_then_backward_and_step(params):
    optimizer = plugin.optim.DistributedOptimizer(torch.optim.SGD, list(params.values()), lr=LR)
    before = values()
    with dist_autograd.context() as context_id:
        loss = forward()
        dist_autograd.backward(context_id, [loss], retain_graph=True)

        def check():
            after, grads = values(), expected_gradients(before, passes=2)
            for name in OWNERS:
                assert torch.allclose(after[name], before[name] - LR * grads[name]), (name, before, after)

        assert_works_or_says_what_to_call(lambda: optimizer.backward_and_step(context_id, [loss]), check)


def test_torch_backward_then_plugin_get_gradients_on_the_owners(params):
    before = values()
    with dist_autograd.context() as context_id:
        dist_autograd.backward(context_id, [forward()])

        def check():
            ours = gradients_on_owners(context_id, "plugin")
            grads = expected_gradients(before)
            assert all(ours[n] is not None and torch.allclose(ours[n], grads[n]) for n in OWNERS), ours

        assert_works_or_says_what_to_call(lambda: gradients_on_owners(context_id, "plugin"), check)


def test_torch_pass_then_plugin_pass_torch_reads_the_sum_plugin_refuses(params):
    """Torch's readers see both passes; the plugin's get_gradients raises, naming both calls."""
    before = values()
    with dist_autograd.context() as context_id:
        loss = forward()
        dist_autograd.backward(context_id, [loss], retain_graph=True)
        plugin.autograd.backward(context_id, [loss])
        theirs = gradients_on_owners(context_id, "torch")
        grads = expected_gradients(before, passes=2)
        assert all(theirs[n] is not None and torch.allclose(theirs[n], grads[n]) for n in OWNERS), theirs
        with pytest.raises(RuntimeError, match=r"holds gradients of backward passes of both engines.*"
                                               r"torch\.distributed\.autograd\.backward"):
            gradients_on_owners(context_id, "plugin")
