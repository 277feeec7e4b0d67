"""plugin.nn.RemoteModule: the owner's forward pass run natively from a torch.export program,
against the same module run eagerly in one process (outputs, input gradients, parameter
gradients, parameters after Adam steps), in train and eval mode, with a dynamic batch size; the
module's mode, its parameters' RRefs, pickling, refusal and the Python fallback; on a real RPC
group (the test process is worker0, the modules live on worker1)."""
import copy

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
import plugin.autograd
from plugin import ops
from plugin.nn import RemoteModule
from plugin.optim import DistributedOptimizer
from tests.support import nn_modules as mods

TOL = dict(rtol=1e-6, atol=1e-6)


def local_twin(remote: RemoteModule, cls, *args):
    """The module built here with the same arguments, holding the owner's current values."""
    twin = cls(*args)
    twin.load_state_dict(rpc.rpc_sync(remote.on, mods.state, args=(remote.module_rref,)))
    return twin


def owner_knows(context_id: int) -> bool:
    """Whether worker1 knows the context (asked from outside it: an RPC sent inside a context
    makes the receiver create it)."""
    previous = ops._swap_current_context(-1)
    try:
        return rpc.rpc_sync("worker1", mods.has_context, args=(context_id,))
    finally:
        ops._swap_current_context(previous)


def leaves(tree):
    return [t for t in torch.utils._pytree.tree_leaves(tree)]


def loss_of(out):
    """A scalar that weighs every output element differently."""
    total = 0
    for i, t in enumerate(leaves(out)):
        w = torch.linspace(-1, 1, t.numel()).reshape(t.shape) * (i + 1)
        total = total + (t * w).sum()
    return total


CASES = {
    "mlp": (mods.MLP, (), lambda b: (torch.randn(b, 6),)),
    "conv": (mods.ConvNet, (), lambda b: (torch.randn(b, 3, 8, 8),)),
    "towers": (mods.TwoTowers, (), lambda b: (torch.randint(0, 10, (b, 3)), (torch.randn(b, 2), torch.randn(b, 3)))),
    "splits": (mods.Splits, (), lambda b: (torch.randn(b, 4),)),
}


def with_grad(inputs):
    """Floating inputs that require grad (leaves), the same values."""
    return torch.utils._pytree.tree_map(
        lambda t: t.clone().requires_grad_(True) if t.is_floating_point() else t, inputs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_training_equals_eager(cluster, case):
    """Three Adam steps through the native forward, the plugin's backward pass and the native
    DistributedOptimizer, at batch sizes 4, 7 and 3 (one export, dimension 0 dynamic), equal the
    same module trained eagerly: outputs, input gradients, and parameters and buffers after each
    step (1e-6)."""
    cls, args, make = CASES[case]
    torch.manual_seed(1)
    remote = RemoteModule("worker1/cpu", cls, args, example_inputs=make(4))
    assert remote.native, remote.reason
    twin = local_twin(remote, cls, *args)
    opt = DistributedOptimizer(torch.optim.Adam, remote.remote_parameters(), lr=0.01)
    local_opt = torch.optim.Adam(twin.parameters(), lr=0.01)
    for step, batch in enumerate((4, 7, 3)):
        inputs = make(batch)
        a, b = with_grad(inputs), with_grad(inputs)
        with dist_autograd.context() as ctx:
            out = remote(*a)
            loss = loss_of(out)
            plugin.autograd.backward(ctx, [loss])
            grads = plugin.autograd.get_gradients(ctx)
            opt.step(ctx)
        local_opt.zero_grad()
        want = twin(*b)
        loss_of(want).backward()
        local_opt.step()
        for got, expected in zip(leaves(out), leaves(want)):
            torch.testing.assert_close(got.detach(), expected.detach(), **TOL)
        for x, y in zip(leaves(a), leaves(b)):
            if y.requires_grad:
                torch.testing.assert_close(grads[x], y.grad, **TOL)
        now = rpc.rpc_sync("worker1", mods.state, args=(remote.module_rref,))
        for name, value in twin.state_dict().items():
            torch.testing.assert_close(now[name], value, **TOL, msg=f"{name} after step {step}")


def test_eval_mode_and_back(cluster):
    """eval() switches the owner's module to its eval program (BatchNorm reads its running
    statistics, which stay as they are), train() back; outputs equal eager's in both modes."""
    remote = RemoteModule("worker1/cpu", mods.ConvNet, example_inputs=(torch.randn(4, 3, 8, 8),))
    twin = local_twin(remote, mods.ConvNet)
    x = torch.randn(5, 3, 8, 8)
    torch.testing.assert_close(remote(x), twin(x), **TOL)  # train mode: statistics update on both
    assert remote.eval() is remote and not remote.training
    twin.eval()
    before = rpc.rpc_sync("worker1", mods.state, args=(remote.module_rref,))
    torch.testing.assert_close(remote(x), twin(x), **TOL)
    after = rpc.rpc_sync("worker1", mods.state, args=(remote.module_rref,))
    assert torch.equal(before["bn.running_mean"], after["bn.running_mean"])
    remote.train()
    twin.train()
    torch.testing.assert_close(remote(x), twin(x), **TOL)
    info = remote._debug_info()
    assert info["training"] == 1 and info["forwards"] == 3


def test_forward_outside_a_context_records_nothing(cluster):
    """Without a context the outputs do not require grad and nothing is recorded."""
    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    out = remote(torch.randn(2, 6, requires_grad=True))
    assert not out.requires_grad
    with dist_autograd.context() as ctx:
        with torch.no_grad():
            out = remote(torch.randn(2, 6))
        assert not out.requires_grad
        assert not owner_knows(ctx)


def test_a_nested_input_is_refused_on_the_caller_naming_the_owner(cluster):
    """A nested tensor (jagged, or of the strided nested layout) is refused before anything is
    sent: torch's RPC cannot send one (its serializer aborts the caller's process, for the native
    call and for a pickled Python call alike). The error names the owner and the argument, nothing
    runs on the owner, and the module answers the next (dense) forward as eager does."""
    import warnings

    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    twin = local_twin(remote, mods.MLP)
    rows = [torch.randn(6), torch.randn(6)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch: the strided layout of nested tensors is a prototype)
        strided = torch.nested.nested_tensor(rows)
    forwards = remote._debug_info()["forwards"]
    for nested in (torch.nested.nested_tensor(rows, layout=torch.jagged), strided):
        for call in (lambda: remote(nested), lambda: remote.forward_async(nested).wait(), lambda: remote(x=nested)):
            with pytest.raises(ValueError, match=r"^RemoteModule.forward of MLP on 'worker1': argument \S+ must be a "
                                                 r"dense \(strided\) tensor, got a nested tensor \(layout torch\."):
                call()
        with dist_autograd.context():
            with pytest.raises(ValueError, match="got a nested tensor"):
                remote(nested.detach().requires_grad_(True))
    assert remote.native and remote._debug_info()["forwards"] == forwards  # nothing ran on the owner
    x = torch.stack(rows)
    torch.testing.assert_close(remote(x), twin(x).detach(), **TOL)
    assert remote._debug_info()["forwards"] == forwards + 1
    # the constructor's example inputs go to the owner by torch's RPC too: refused there first
    before = rpc.rpc_sync("worker1", plugin.debug_info)["num_native_modules"]
    for nested in (torch.nested.nested_tensor(rows, layout=torch.jagged), strided):
        with pytest.raises(ValueError, match=r"^RemoteModule: example_inputs: argument args\[0\] must be a dense "
                                             r"\(strided\) tensor, got a nested tensor \(layout torch\."):
            RemoteModule("worker1/cpu", mods.MLP, example_inputs=(nested,))
    assert rpc.rpc_sync("worker1", plugin.debug_info)["num_native_modules"] <= before  # none was built


def test_torchs_engine_runs_the_backward_too(cluster):
    """torch's dist_autograd.backward through a native forward gives the input and parameter
    gradients of eager autograd on the same module, as the plugin's engine does."""
    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    twin = local_twin(remote, mods.MLP)
    x = torch.randn(4, 6)
    eager_x = x.clone().requires_grad_(True)
    loss_of(twin(eager_x)).backward()
    want_params = [p.grad for p in twin.parameters()]
    for engine in ("plugin", "torch"):
        a = x.clone().requires_grad_(True)
        with dist_autograd.context() as ctx:
            input_grad = mods.backward_input_gradient(engine, ctx, loss_of(remote(a)), a)
            params = rpc.rpc_sync("worker1", mods.parameter_gradients, args=(remote.module_rref, ctx, engine))
        torch.testing.assert_close(input_grad, eager_x.grad, **TOL)
        assert len(params) == len(want_params), engine
        for got, want in zip(params, want_params):
            torch.testing.assert_close(got, want, **TOL)


def test_a_step_is_seen_by_the_next_forward(cluster):
    """The program reads the live parameters: a step of the DistributedOptimizer over
    remote_parameters() changes the next forward's output as it changes eager's; the snapshot is
    taken once per version, not per forward."""
    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    twin = local_twin(remote, mods.MLP)
    x = torch.randn(2, 6)
    torch.testing.assert_close(remote(x), twin(x), **TOL)
    torch.testing.assert_close(remote(x), twin(x), **TOL)
    assert remote._debug_info()["snapshots"] == 1
    opt = DistributedOptimizer(torch.optim.SGD, remote.remote_parameters(), lr=0.5)
    with dist_autograd.context() as ctx:
        plugin.autograd.backward(ctx, [remote(x).sum()])
        opt.step(ctx)
    twin(x).sum().backward()
    torch.optim.SGD(twin.parameters(), lr=0.5).step()
    torch.testing.assert_close(remote(x), twin(x), **TOL)
    assert remote._debug_info()["snapshots"] == 2


def test_pickled_into_an_rpc_it_works_on_the_receiver(cluster):
    """A RemoteModule sent to worker2 runs its forward there natively (on the owner, worker1:
    the owner's native forward counter moves by one), with eager's output."""
    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    twin = local_twin(remote, mods.MLP)
    x = torch.randn(2, 6)
    before = remote._debug_info()["forwards"]
    there, native = rpc.rpc_sync("worker2", _forward_there, args=(remote, x))
    assert native is True
    assert remote._debug_info()["forwards"] == before + 1
    torch.testing.assert_close(there, twin(x), **TOL)


def _forward_there(remote, x):
    return remote(x), remote.native


def test_rank_device_string_and_repr(cluster):
    remote = RemoteModule("rank:1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    assert remote.on == "worker1" and remote.device == torch.device("cpu")
    assert repr(remote) == "RemoteModule(MLP on 'worker1', device=cpu, native)"
    assert remote.get_module_rref().owner().name == "worker1"
    with pytest.raises(ValueError, match=r"Method ``parameters`` not supported for RemoteModule"):
        remote.parameters()


def test_a_module_that_cannot_run_natively_falls_back_or_is_refused(cluster):
    """An operator with a Python kernel: by default the module runs by pickled Python call (one
    warning, ``.native`` False, ``.reason`` naming the operator) and its gradients reach the
    owner; with fullgraph=True it is refused at construction naming the class, the owner, the
    node and the operator."""
    with pytest.raises(RuntimeError) as raised:
        RemoteModule("worker1/cpu", mods.PythonOpModule, example_inputs=(torch.randn(2, 3),), fullgraph=True)
    text = str(raised.value)
    assert "PythonOpModule cannot run natively" in text and "'worker1'" in text
    assert "gilfree_tests.twice" in text and "written in Python" in text, text
    with pytest.warns(UserWarning, match="runs .* by the Python path"):
        remote = RemoteModule("worker1/cpu", mods.PythonOpModule, example_inputs=(torch.randn(2, 3),))
    assert not remote.native and "written in Python" in remote.reason
    x = torch.randn(2, 3, requires_grad=True)
    with dist_autograd.context() as ctx:
        out = remote(x)
        plugin.autograd.backward(ctx, [out.sum()])
        assert plugin.autograd.get_gradients(ctx)[x].shape == (2, 3)


def test_a_module_export_refuses_is_refused_with_exports_message(cluster):
    with pytest.raises(RuntimeError) as raised:
        RemoteModule("worker1/cpu", mods.DataDependent, example_inputs=(torch.randn(2, 3),), fullgraph=True)
    text = str(raised.value)
    assert "DataDependent cannot run natively: torch.export.export failed" in text and "'worker1'" in text, text


def test_construction_errors(cluster):
    with pytest.raises(TypeError, match="example_inputs must be a tuple"):
        RemoteModule("worker1/cpu", mods.MLP, example_inputs=torch.randn(2, 6))
    with pytest.raises(TypeError, match="fullgraph must be a bool"):
        RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(2, 6),), fullgraph="python")
    with pytest.raises(ValueError, match="no worker has rank 17"):
        RemoteModule("rank:17/cpu", mods.MLP, example_inputs=(torch.randn(2, 6),))
    with pytest.raises(ValueError, match=r"^RemoteModule: the construction of MLP failed on owner 'worker1': "
                                         r"ValueError: invalid literal for int\(\) with base 10: 'sizes'"):
        RemoteModule("worker1/cpu", mods.MLP, ((6, 4), "sizes"), example_inputs=(torch.randn(2, 6),))


def test_the_owner_answers_while_a_thread_holds_its_gil(cluster):
    """The forward (recorded, in a context) and its backward pass complete on the owner while a
    thread there holds the GIL for 4 seconds: neither needs the owner's Python."""
    import time

    remote = RemoteModule("worker1/cpu", mods.ConvNet, example_inputs=(torch.randn(2, 3, 8, 8),))
    remote(torch.randn(2, 3, 8, 8))  # the first snapshot
    until = rpc.rpc_sync("worker1", mods.hold_gil, args=(4.0,))
    time.sleep(0.5)  # the thread holds the owner's GIL now
    x = torch.randn(4, 3, 8, 8, requires_grad=True)
    with dist_autograd.context() as ctx:
        out = remote(x)
        plugin.autograd.backward(ctx, [out.sum()])
        assert plugin.autograd.get_gradients(ctx)[x].shape == x.shape
        done_at = time.time()
    assert done_at < until - 0.5, (done_at, until)


def test_a_released_module_is_refused_and_unknown_handles_too(cluster):
    """When the last RRef to a module goes (the RemoteModule is deleted), the owner forgets its
    handle: a forward sent to it raises, naming the handle; so does a handle never made."""
    import gc
    import time

    from plugin import _rpc_functions

    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    handle = remote._handle
    x = torch.randn(2, 6)

    def forward_of(h):
        return _rpc_functions.call("worker1", "_remote_forward", (h, -1, -1, [x], [False], False))

    forward_of(handle).wait()
    del remote
    gc.collect()
    deadline = time.monotonic() + 20
    while True:
        try:
            forward_of(handle).wait()
        except RuntimeError as error:
            assert f"remote_forward: handle {handle} is not a remote module on this worker (never registered, or " \
                   f"released)" in str(error)
            break
        assert time.monotonic() < deadline, "the owner still runs the module of a deleted RemoteModule"
        time.sleep(0.2)
    with pytest.raises(RuntimeError, match="handle 987654 is not a remote module on this worker"):
        forward_of(987654).wait()


def test_the_workers_counters_follow_the_modules(cluster):
    """plugin.debug_info() on the owner (one op, every room's counters) counts the native modules
    alive there and their forwards and snapshots, as the module's own counters do; the caller's do
    not move (the forward runs on the owner)."""
    before = rpc.rpc_sync("worker1", plugin.debug_info)
    caller_before = plugin.debug_info()
    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    x = torch.randn(2, 6)
    remote(x), remote(x)
    after = rpc.rpc_sync("worker1", plugin.debug_info)
    own = remote._debug_info()
    assert (own["forwards"], own["snapshots"], own["programs"]) == (2, 1, 1)
    assert after["num_native_forwards"] - before["num_native_forwards"] == own["forwards"]
    assert after["num_snapshots"] - before["num_snapshots"] == own["snapshots"]
    assert after["num_native_modules"] >= 1
    # the module holds a lock per parameter on its owner (shared with the optimizer's)
    assert after["num_param_locks"] >= len(remote.remote_parameters())
    caller_after = plugin.debug_info()
    assert caller_after["num_native_forwards"] == caller_before["num_native_forwards"]
    # every room's counters, no name twice (the op raises an internal error otherwise)
    assert {"num_live_contexts", "num_prepared_steps", "num_param_locks", "num_native_modules"} <= set(after)
