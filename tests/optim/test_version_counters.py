"""Every write of a parameter or a state tensor moves its version counter (``_version``), as
torch.optim's in-place ops move it, so that a backward pass that saved a parameter before a step
changed it raises torch's error ("one of the variables needed for gradient computation has been
modified by an inplace operation") instead of computing with the new values.

torch.optim's single-tensor and foreach steps move the counter of every tensor they write (one
or more per step); its fused CPU kernels (``fused=True``) move none of a parameter's (checked on
torch 2.13 and 2.15: :func:`test_torchs_fused_cpu_step_moves_no_parameter_counter`). Ours: every
implementation of every functional_optim class, the native local optimizers and every step
protocol of the distributed optimizer move the counter of each parameter and state tensor a step
writes; the group step (the default implementation, the native local optimizers') by exactly one
per step, as one in-place op over them. The stale-backward tests run two trainers and the owner
of an ``nn.Linear`` in real processes, with the plugin's engine and with torch's.
"""
import copy

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import functional_optim as F
import plugin
from plugin.optim import DistributedOptimizer, NativeLocalOptimizer
from tests.support import optim_configs as C
from tests.support import optim_remote, stale_backward

TORCH_STALE_ERROR = "one of the variables needed for gradient computation has been modified by an inplace operation"


def _versions(params, state):
    """The counters of the parameters and of each parameter's state tensors (by key)."""
    return [p._version for p in params], [{k: t._version for k, t in s.items()} for s in state]


def _moves(before, after):
    (p0, s0), (p1, s1) = before, after
    return [b - a for a, b in zip(p0, p1)], [{k: s[k] - t.get(k, 0) for k in s} for t, s in zip(s0, s1)]


def _torch_moves(info, kwargs, grads_of):
    """How torch.optim's single-tensor step moves the counters at its third step."""
    params = [torch.nn.Parameter(p) for p in C.make_params(torch.float64, info=info)]
    opt = info.torch_class(params, **C.impl_flags(info, "single", for_torch=True), **kwargs)
    before = None
    for step in range(3):
        for p, g in zip(params, grads_of(step)):
            p.grad = g
        before = _versions(params, [opt.state[p] for p in params])
        opt.step()
    return _moves(before, _versions(params, [opt.state[p] for p in params]))


def _our_moves(info, kwargs, impl, grads_of):
    """How ours moves them at its third step: ``impl`` one of the class's implementations
    (``"default"``: its group step)."""
    params = C.make_params(torch.float64, info=info)
    flags = {} if impl == "default" else C.impl_flags(info, impl)
    opt = info.ours(params, **kwargs, **flags)
    before = None
    for k in range(3):
        before = _versions(params, [opt.get_state().get(i, {}) for i in range(len(params))])
        opt.step(grads_of(k))
    return _moves(before, _versions(params, [opt.get_state().get(i, {}) for i in range(len(params))]))


def _cases():
    for info in C.INFOS:
        for impl in ("default", "native") + tuple(i for i in info.impls if i != "fused"):
            yield pytest.param(info, impl, id=f"{info.name}-{impl}")


@pytest.mark.parametrize("info, impl", list(_cases()))
def test_a_step_moves_every_counter_torchs_in_place_ops_move(info, impl):
    """Parameters and state: a counter that torch.optim's single-tensor step moves, ours moves
    too (and no other); the group step (default and native) moves each parameter's by one."""
    kwargs = dict(info.configs[0].kwargs)
    gen = torch.Generator().manual_seed(3)
    grads = [[torch.randn(s, generator=gen, dtype=torch.float64) for s in C.shapes_of(info)] for _ in range(3)]
    torch_params, torch_state = _torch_moves(info, kwargs, lambda k: [g.clone() for g in grads[k]])
    if impl == "native":
        params = C.make_params(torch.float64, info=info)
        opt = NativeLocalOptimizer(info.ours, params, **kwargs)
        for k in range(2):
            opt.step_gradients(grads[k])
        before = [p._version for p in params]
        opt.step_gradients(grads[2])
        moved = [p._version - b for p, b in zip(params, before)]
        assert moved == [1] * len(params), moved
        assert all(m > 0 for m in torch_params), torch_params
        return
    our_params, our_state = _our_moves(info, kwargs, impl, lambda k: [g.clone() for g in grads[k]])
    assert [m > 0 for m in our_params] == [m > 0 for m in torch_params], (our_params, torch_params)
    if impl == "default":
        assert our_params == [1] * len(our_params), our_params
    for ours, theirs in zip(our_state, torch_state):
        assert sorted(ours) == sorted(theirs)
        assert {k: v > 0 for k, v in ours.items()} == {k: v > 0 for k, v in theirs.items()}, (ours, theirs)


def test_the_native_step_writes_every_state_tensor_of_a_parameter():
    """The native local optimizer's state (kept in C++; its state_dict gives copies): a step
    writes every state tensor of a stepped parameter (the group step moves the counter of each
    of them, as of the parameter)."""
    params = C.make_params(torch.float64)
    reference = torch.optim.NAdam([torch.nn.Parameter(p.clone()) for p in params], lr=0.01)
    for p, g in zip(reference.param_groups[0]["params"], [torch.ones_like(p) for p in params]):
        p.grad = g
    reference.step()
    opt = NativeLocalOptimizer(F.NAdam, params, lr=0.01)
    opt.load_state_dict(reference.state_dict())
    saved = opt.state_dict()
    before = {i: {k: t.clone() for k, t in s.items()} for i, s in saved["state"].items()}
    versions = [p._version for p in params]
    opt.step_gradients([torch.ones_like(p) for p in params])
    assert [p._version - v for p, v in zip(params, versions)] == [1] * len(params)
    after = opt.state_dict()["state"]
    for i in before:
        for key in before[i]:
            assert not torch.equal(before[i][key], after[i][key]), (i, key)  # every state tensor written


def test_sparse_adam_moves_the_counters_of_what_it_writes():
    """SparseAdam (sparse gradients only): the parameter's counter moves by one per step,
    eagerly and natively; torch's moves too."""
    def grad(k):
        return torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.full((2, 3), 0.5 + k), (4, 3))

    theirs = torch.nn.Parameter(torch.ones(4, 3))
    reference = torch.optim.SparseAdam([theirs], lr=0.1)
    eager_param, native_param = torch.ones(4, 3), torch.ones(4, 3)
    eager = F.SparseAdam([eager_param], lr=0.1)
    native = NativeLocalOptimizer(F.SparseAdam, [native_param], lr=0.1)
    for k in range(3):
        before = [theirs._version, eager_param._version, native_param._version]
        theirs.grad = grad(k)
        reference.step()
        eager.step([grad(k)])
        native.step_gradients([grad(k)])
        after = [theirs._version, eager_param._version, native_param._version]
        assert after[0] > before[0] and after[1] - before[1] == 1 and after[2] - before[2] == 1


def test_torchs_fused_cpu_step_moves_no_parameter_counter():
    """What the module docstring says of torch.optim's fused CPU kernels (ours move them)."""
    for cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad):
        param = torch.nn.Parameter(torch.ones(5))
        opt = cls([param], lr=0.1, fused=True)
        param.grad = torch.ones(5)
        before = param._version
        opt.step()
        assert param._version == before, cls
        ours = torch.ones(5)
        native = NativeLocalOptimizer(F.functional_optimizer_for(cls), [ours], lr=0.1, fused=True)
        native.step_gradients([torch.ones(5)])
        assert ours._version == 1, cls


def test_load_state_dict_then_a_step_moves_the_counters():
    """After load_state_dict (state copied and cast, values set), a step moves the parameters'
    counters by one, eagerly and natively, as torch's own step after a load moves them."""
    base = C.make_params(torch.float64)
    reference = torch.optim.Adam([torch.nn.Parameter(p.clone()) for p in base], lr=0.01)
    for p in reference.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    reference.step()
    saved = copy.deepcopy(reference.state_dict())
    eager_params, native_params = [p.clone() for p in base], [p.clone() for p in base]
    eager, native = F.Adam(eager_params, lr=0.5), NativeLocalOptimizer(F.Adam, native_params, lr=0.5)
    for opt in (eager, native):
        opt.load_state_dict(copy.deepcopy(saved))
    before = [p._version for p in eager_params + native_params]
    eager.step([torch.ones_like(p) for p in base])
    native.step_gradients([torch.ones_like(p) for p in base])
    assert [p._version - b for p, b in zip(eager_params + native_params, before)] == [1] * (2 * len(base))


@pytest.mark.torchscript
def test_the_torchscript_local_optimizer_moves_the_counters():
    from plugin.optim import ScriptLocalOptimizer

    params = C.make_params(torch.float64)
    local = ScriptLocalOptimizer.create(F.RMSprop, params, lr=0.01)
    before = [p._version for p in params]
    local.step_gradients([torch.ones_like(p) for p in params])
    assert [p._version - b for p, b in zip(params, before)] == [1] * len(params)


# --- the distributed optimizer's protocols, on real owners ----------------------------------


def _owner_version(owner, name):
    return rpc.rpc_sync(owner, optim_remote.param_version, args=(name,))


@pytest.mark.parametrize("optimizer_class, kwargs, kind", [
    (torch.optim.Adam, {"lr": 0.01}, "native"),
    (torch.optim.RMSprop, {"lr": 0.01}, "native"),
    (torch.optim.Adam, {"lr": 0.01, "foreach": True}, "python"),
], ids=["adam-native", "rmsprop-native", "adam-python"])
def test_every_protocol_moves_the_owners_counters(cluster, optimizer_class, kwargs, kind):
    """One round trip, two phases, the step inside the backward pass, a step after a load: each
    moves the owner's parameter counter (native: by one per step; Python: as torch.optim's
    foreach step, which moves it), before the caller hears of it."""
    owner, name = "worker1", f"versions_{optimizer_class.__name__}_{kind}"
    rref = rpc.rpc_sync(owner, optim_remote.make_param, args=(name, (3, 4), 11))
    opt = DistributedOptimizer(optimizer_class, [rref], **kwargs)
    assert list(opt.local_optimizer_kinds.values()) == [kind]

    def loss():
        return (rpc.rpc_sync(owner, optim_remote.use_param, args=(torch.full((4,), 0.5, dtype=torch.float64), name)) ** 2).sum()

    def moved(run):
        before = _owner_version(owner, name)
        run()
        return _owner_version(owner, name) - before

    def one_round_trip():
        with dist_autograd.context() as ctx:
            plugin.autograd.backward(ctx, [loss()])
            opt.step(ctx)

    def two_phases():
        with dist_autograd.context() as ctx:
            dist_autograd.backward(ctx, [loss()])  # torch's engine: the two phases
            opt.step(ctx)

    def in_the_backward_pass():
        with dist_autograd.context() as ctx:
            opt.backward_and_step(ctx, [loss()])

    def after_a_load():
        opt.load_state_dict(opt.state_dict())
        one_round_trip()

    for run in (one_round_trip, two_phases, in_the_backward_pass, after_a_load):
        steps = moved(run)
        if kind == "native":
            assert steps == 1, run.__name__
        else:
            assert steps >= 1, run.__name__


# --- a stale backward pass: two trainers ------------------------------------------------------


def _stale_backward(engine, optimizer_class, kwargs, name):
    """Trainer A (this process) runs a pickled Python forward of the owner's nn.Linear
    (worker2); trainer B (worker1) runs a whole iteration over it, with a step; A's backward
    then raises, or returns (None)."""
    owner = "worker2"
    rrefs = rpc.rpc_sync(owner, stale_backward.make_linear, args=(name, 5))
    with dist_autograd.context() as ctx:
        x = torch.ones(2, 4, dtype=torch.float64, requires_grad=True)
        loss = rpc.rpc_sync(owner, stale_backward.forward, args=(name, x)).sum()
        before = rpc.rpc_sync(owner, stale_backward.versions, args=(name,))
        rpc.rpc_sync("worker1", stale_backward.trainer_iteration, args=(owner, name, rrefs, optimizer_class, kwargs, engine))
        after = rpc.rpc_sync(owner, stale_backward.versions, args=(name,))
        assert all(b > a for a, b in zip(before, after)), (before, after)  # B's step moved them
        try:
            if engine == "plugin":
                plugin.autograd.backward(ctx, [loss])
            else:
                dist_autograd.backward(ctx, [loss])
        except RuntimeError as e:
            return str(e)
    return None


@pytest.mark.parametrize("optimizer_class, kwargs", [
    (torch.optim.SGD, {"lr": 0.5}), (torch.optim.Adam, {"lr": 0.5}), (torch.optim.Adam, {"lr": 0.5, "foreach": True}),
], ids=["sgd-native", "adam-native", "adam-python"])
@pytest.mark.parametrize("engine", ["plugin", "torch"])
def test_a_backward_through_weights_another_trainer_stepped_raises_torchs_error(cluster, engine, optimizer_class, kwargs):
    """A's forward saved the owner's weight; B's step changed it before A's backward: the
    backward raises torch's error (torch's text first, then what says where), with either
    engine; it never computes A's gradients from B's new weights."""
    name = f"stale_{engine}_{optimizer_class.__name__}_{len(kwargs)}"
    error = _stale_backward(engine, optimizer_class, kwargs, name)
    assert error is not None, "the stale backward pass computed gradients from the stepped weights"
    # torch's distributed form ("Error on Node <owner's id>: ") and torch's own text: first with
    # the plugin's engine, which adds where after it; torch's engine wraps it once more
    if engine == "plugin":
        assert error.startswith(f"Error on Node 2: {TORCH_STALE_ERROR}: "), error
        assert "on worker 'worker2' (id 2)" in error.split(TORCH_STALE_ERROR, 1)[1], error
    else:
        assert error.startswith(f"Error on Node 0: Error on Node 2: {TORCH_STALE_ERROR}: "), error
