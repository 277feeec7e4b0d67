"""Sparse gradients (issue 22): functional_optim.SparseAdam against torch.optim.SparseAdam, the
sparse paths of Adagrad and SGD against torch.optim's, the fused sparse CPU kernels
(torch.ops.gilfree_optim.sparse_adam_ / sparse_adagrad_ / sparse_sgd_), and the native local
optimizer over SparseAdam.

Tolerances. torch's composite path (our ``fused=False``) makes torch's calls, so it is compared
bitwise. The fused kernels compute IEEE square roots and separate multiplies and adds, where
torch's CPU ``sqrt`` of a float32 tensor is not always correctly rounded (observed on torch
2.13 with ATEN_CPU_CAPABILITY avx512 and default: ``torch.sqrt(x) != torch.sqrt(x.double())
.float()`` for some x; ATen takes it from MKL's vector math) and torch adds the sparse update
with BLAS ``axpy`` (which may fuse the multiply-add): a few ulp per step on the
parameters, so the parameters are compared within ``PARAM_TOL`` (float32: rtol 1e-6, atol 1e-7
at values of order 1 and updates of order lr = 1e-2 over 6 steps). SparseAdam's moments involve
no square root and no scaled add, so they are compared bitwise for every dtype, and so are
Adagrad's sums.
"""
import copy

import pytest
import torch

import functional_optim as F
from functional_optim.sparse_adam import sparse_adam

ROWS, COLS = 40, 8
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
PARAM_TOL = {
    torch.float32: dict(rtol=1e-6, atol=1e-7),
    torch.float64: dict(rtol=1e-14, atol=1e-15),
    torch.bfloat16: dict(rtol=8e-3, atol=1e-3),
    torch.float16: dict(rtol=1e-3, atol=1e-4),
}


def sparse_grads(dtype, seed, coalesced=False, shape=(ROWS, COLS), steps=6):
    """Sparse gradients for `steps` steps: duplicate indices in each non-empty one (uncoalesced
    unless `coalesced`), one without entries (step 2)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for step, n in enumerate([6, 0, 9, 3, 12, 5][:steps]):
        idx = torch.randint(0, shape[0], (1, n), generator=gen)
        if n > 1:
            idx[0, -1] = idx[0, 0]
        vals = torch.randn((n,) + tuple(shape[1:]), generator=gen).to(dtype)
        g = torch.sparse_coo_tensor(idx, vals, shape, check_invariants=True)
        out.append(g.coalesce() if coalesced else g)
    return out


def base_params(dtype, seed=0, shape=(ROWS, COLS)):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen).to(dtype), torch.randn(shape, generator=gen).to(dtype)]


def run_pair(torch_class, ours_class, dtype, kwargs, coalesced=False, groups=False, seed=1):
    """Steps torch's optimizer (through .grad) and ours (gradients passed in) alike; returns
    (torch optimizer, torch params, ours, our params)."""
    base = base_params(dtype)
    tp = [torch.nn.Parameter(b.clone()) for b in base]
    op = [b.clone() for b in base]
    if groups:
        tgroups = [{"params": [tp[0]]}, {"params": [tp[1]], "lr": kwargs.get("lr", 1e-2) * 3}]
        ogroups = [{"params": [op[0]]}, {"params": [op[1]], "lr": kwargs.get("lr", 1e-2) * 3}]
    else:
        tgroups, ogroups = tp, op
    reference = torch_class(tgroups, **kwargs)
    ours = ours_class(ogroups, **kwargs)
    g0 = sparse_grads(dtype, seed, coalesced)
    g1 = sparse_grads(dtype, seed + 1, coalesced)
    for a, b in zip(g0, g1):
        tp[0].grad, tp[1].grad = a.clone(), b.clone()
        reference.step()
        ours.step([a.clone(), b.clone()])
    return reference, tp, ours, op


# ----------------------------------------------------------------------------- SparseAdam


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("coalesced", [False, True], ids=["uncoalesced", "coalesced"])
@pytest.mark.parametrize("maximize", [False, True], ids=["min", "max"])
def test_sparse_adam_matches_torch(dtype, coalesced, maximize):
    kwargs = dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, maximize=maximize)
    reference, tp, ours, op = run_pair(torch.optim.SparseAdam, F.SparseAdam, dtype, kwargs, coalesced, groups=True)
    assert ours._s.impl == ["fused", "fused"]  # the fused sparse kernel stepped them
    for t, o in zip(tp, op):
        torch.testing.assert_close(o, t.detach(), **PARAM_TOL[dtype])
        assert o.dtype == dtype
    ts, os_ = reference.state_dict(), ours.state_dict()
    for i, t in enumerate(tp):
        assert list(os_["state"][i]) == ["step", "exp_avg", "exp_avg_sq"]
        assert os_["state"][i]["step"] == ts["state"][i]["step"] == 6 and type(os_["state"][i]["step"]) is int
        assert torch.equal(os_["state"][i]["exp_avg"], ts["state"][i]["exp_avg"])
        assert torch.equal(os_["state"][i]["exp_avg_sq"], ts["state"][i]["exp_avg_sq"])
    assert os_["param_groups"] == ts["param_groups"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fused", [False, True], ids=["composite", "kernel"])
def test_sparse_adam_functional_form(dtype, fused):
    """sparse_adam(): the composite path is torch's sparse_adam bitwise; the kernel within
    PARAM_TOL, moments bitwise; fully sparse (sparse_dim 2) and hybrid 3-D gradients too."""
    for shape, sparse_dim in [((ROWS, COLS), 1), ((6, 5), 2), ((10, 3, 4), 1)]:
        gen = torch.Generator().manual_seed(3)
        p = torch.randn(shape, generator=gen).to(dtype)
        ours = [p.clone(), torch.zeros_like(p), torch.zeros_like(p), torch.zeros(())]
        theirs = [p.clone(), torch.zeros_like(p), torch.zeros_like(p)]
        for step in range(1, 5):
            idx = torch.stack([torch.randint(0, shape[d], (7,), generator=gen) for d in range(sparse_dim)])
            vals = torch.randn((7,) + shape[sparse_dim:], generator=gen).to(dtype)
            g = torch.sparse_coo_tensor(idx, vals, shape)
            sparse_adam([ours[0]], [g], [ours[1]], [ours[2]], [ours[3]], fused, eps=1e-8, beta1=0.9, beta2=0.999,
                        lr=1e-2, maximize=False)
            torch.optim._functional.sparse_adam([theirs[0]], [g], [theirs[1]], [theirs[2]], [step], eps=1e-8,
                                                beta1=0.9, beta2=0.999, lr=1e-2, maximize=False)
        assert ours[3].item() == 4
        assert torch.equal(ours[1], theirs[1]) and torch.equal(ours[2], theirs[2])
        if fused:
            torch.testing.assert_close(ours[0], theirs[0], **PARAM_TOL[dtype])
        else:
            assert torch.equal(ours[0], theirs[0])


def test_sparse_adam_empty_gradient_counts_the_step_only():
    p = torch.randn(ROWS, COLS)
    opt = F.SparseAdam([p])
    before = p.clone()
    opt.step([torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.long), torch.zeros(0, COLS), (ROWS, COLS))])
    assert torch.equal(p, before)
    state = opt.state_dict()["state"][0]
    assert state["step"] == 1 and not state["exp_avg"].any() and not state["exp_avg_sq"].any()


def test_sparse_adam_constructor_errors_match_torch():
    p = torch.randn(3, 2)
    cases = [dict(lr=0.0), dict(lr=-1.0), dict(eps=0.0), dict(betas=(1.0, 0.9)), dict(betas=(0.9, -0.1)),
             dict(lr=torch.tensor([0.1, 0.2]))]
    for kwargs in cases:
        with pytest.raises(ValueError) as theirs:
            torch.optim.SparseAdam([torch.nn.Parameter(p.clone())], **kwargs)
        with pytest.raises(ValueError) as ours:
            F.SparseAdam([p.clone()], **kwargs)
        assert str(ours.value) == str(theirs.value), kwargs
    sparse_p = torch.randn(3, 2).to_sparse()
    complex_p = torch.randn(3, 2, dtype=torch.complex64)
    for params in ([p.clone(), sparse_p], [complex_p]):
        with pytest.raises(ValueError) as theirs:
            torch.optim.SparseAdam(params)
        with pytest.raises(ValueError) as ours:
            F.SparseAdam(params)
        assert str(ours.value) == str(theirs.value)


def test_sparse_adam_dense_gradient_raises_torchs_error_and_changes_nothing():
    params = base_params(torch.float32)
    opt = F.SparseAdam([{"params": [params[0]]}, {"params": [params[1]]}], lr=0.1)
    opt.step([sparse_grads(torch.float32, 1)[0], None])
    snapshot = copy.deepcopy(opt.state_dict())
    values = [p.clone() for p in params]
    with pytest.raises(RuntimeError) as theirs:
        tp = torch.nn.Parameter(params[1].clone())
        tp.grad = torch.ones_like(tp)
        torch.optim.SparseAdam([tp]).step()
    assert str(theirs.value) == "SparseAdam does not support dense gradients, please consider Adam instead"
    for call in (lambda: opt.step([sparse_grads(torch.float32, 2)[0], torch.ones_like(params[1])]),
                 lambda: opt.step_param(params[1], torch.ones_like(params[1]))):
        with pytest.raises(RuntimeError) as ours:
            call()
        assert str(ours.value) == str(theirs.value)
    for p, v in zip(params, values):
        assert torch.equal(p, v)
    after = opt.state_dict()
    assert after["state"][0]["step"] == snapshot["state"][0]["step"] == 1
    assert torch.equal(after["state"][0]["exp_avg"], snapshot["state"][0]["exp_avg"])
    assert 1 not in after["state"]
    with pytest.raises(ValueError, match=r"gradients\[1\]: expected shape \[40, 8\]"):
        opt.step([None, torch.sparse_coo_tensor(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 3), (40, 3))])


def test_sparse_adam_state_dict_round_trip_with_torch():
    """torch -> ours -> torch: each continues exactly where the other stopped."""
    dtype = torch.float64
    reference, tp, ours, op = run_pair(torch.optim.SparseAdam, F.SparseAdam, dtype, dict(lr=0.05))
    # ours loads torch's state (int steps) and continues like torch
    fresh = [t.detach().clone() for t in tp]
    loaded = F.SparseAdam(fresh, lr=0.05)
    loaded.load_state_dict(reference.state_dict())
    # torch loads ours
    back_params = [torch.nn.Parameter(t.detach().clone()) for t in tp]
    back = torch.optim.SparseAdam(back_params, lr=0.05)
    back.load_state_dict(copy.deepcopy(loaded.state_dict()))  # (torch keeps the tensors it is given)
    for a, b in zip(sparse_grads(dtype, 7), sparse_grads(dtype, 8)):
        for t, g in zip(tp, (a, b)):
            t.grad = g.clone()
        reference.step()
        loaded.step([a.clone(), b.clone()])
        for t, g in zip(back_params, (a, b)):
            t.grad = g.clone()
        back.step()
    for t, o, b in zip(tp, fresh, back_params):
        torch.testing.assert_close(o, t.detach(), **PARAM_TOL[dtype])
        assert torch.equal(b.detach(), t.detach())
    assert loaded.state_dict()["state"][0]["step"] == 12


@pytest.mark.torchscript
def test_sparse_adam_scripts():
    """SparseAdam compiles with TorchScript on request, as the other ten (nothing on a default
    path scripts it)."""
    import warnings

    from functional_optim.scripting import script_optimizer

    base = base_params(torch.float32)
    eager_params = [b.clone() for b in base]
    script_params = [b.clone() for b in base]
    eager = F.SparseAdam(eager_params, lr=0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = script_optimizer(F.SparseAdam(script_params, lr=0.02))
    for a, b in zip(sparse_grads(torch.float32, 1), sparse_grads(torch.float32, 2)):
        eager.step([a, b])
        scripted.step([a, b])
    for e, s in zip(eager_params, script_params):
        assert torch.equal(e, s)


# ----------------------------------------------------------------------------- Adagrad, SGD


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(
    "kwargs", [dict(lr=0.1), dict(lr=0.1, lr_decay=0.05, initial_accumulator_value=0.2, eps=1e-6, maximize=True)],
    ids=["plain", "decay-max"],
)
def test_sparse_adagrad_matches_torch(dtype, kwargs):
    reference, tp, ours, op = run_pair(torch.optim.Adagrad, F.Adagrad, dtype, kwargs, groups=True)
    for t, o in zip(tp, op):
        torch.testing.assert_close(o, t.detach(), **PARAM_TOL[dtype])
    ts, os_ = reference.state_dict(), ours.state_dict()
    for i in range(2):
        assert torch.equal(os_["state"][i]["sum"], ts["state"][i]["sum"])
        assert torch.equal(os_["state"][i]["step"], ts["state"][i]["step"])


def test_sparse_adagrad_and_sgd_errors_match_torch():
    """torch's rules for sparse gradients: neither with weight_decay (Adagrad's message; SGD's
    step fails in torch's grad.add(param)), neither with fused=True; raised before anything
    changes."""
    cases = [(torch.optim.Adagrad, F.Adagrad, dict(weight_decay=0.1)), (torch.optim.Adagrad, F.Adagrad, dict(fused=True)),
             (torch.optim.SGD, F.SGD, dict(lr=0.1, fused=True)), (torch.optim.SGD, F.SGD, dict(lr=0.1, weight_decay=0.1)),
             (torch.optim.SGD, F.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.1))]
    for torch_class, ours_class, kwargs in cases:
        p = base_params(torch.float32)[0]
        g = sparse_grads(torch.float32, 1)[0]
        tp = torch.nn.Parameter(p.clone())
        tp.grad = g
        with pytest.raises(RuntimeError) as theirs:
            torch_class([tp], **kwargs).step()
        ours = ours_class([p], **kwargs)
        before = copy.deepcopy(ours.state_dict())
        value = p.clone()
        with pytest.raises(RuntimeError) as mine:
            ours.step([g])
        assert str(mine.value) == str(theirs.value)
        assert torch.equal(p, value)
        after = ours.state_dict()
        for i, entry in before["state"].items():
            for key, v in entry.items():
                assert torch.equal(after["state"][i][key], v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(
    "kwargs", [dict(lr=0.1), dict(lr=0.1, maximize=True), dict(lr=0.1, momentum=0.9, dampening=0.1),
               dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)],
    ids=["plain", "max", "momentum", "nesterov"],
)
def test_sparse_sgd_matches_torch(dtype, kwargs):
    """Without momentum and weight decay the fused sparse kernel (rows present only); with them
    torch's composite ops (a sparse momentum buffer, as torch's), bitwise."""
    reference, tp, ours, op = run_pair(torch.optim.SGD, F.SGD, dtype, kwargs)
    for t, o in zip(tp, op):
        if kwargs.get("momentum", 0) == 0 and kwargs.get("weight_decay", 0) == 0:
            torch.testing.assert_close(o, t.detach(), **PARAM_TOL[dtype])
        else:
            assert torch.equal(o, t.detach())
    if kwargs.get("momentum", 0) != 0:
        for i in range(2):
            theirs = reference.state_dict()["state"][i]["momentum_buffer"]
            mine = ours.state_dict()["state"][i]["momentum_buffer"]
            assert mine.is_sparse == theirs.is_sparse
            assert torch.equal(mine.to_dense(), theirs.to_dense())


# ----------------------------------------------------------------------------- the kernels


def test_sparse_kernels_bad_input_raises_before_any_change():
    p = torch.randn(ROWS, COLS)
    m, v, s = torch.zeros_like(p), torch.zeros_like(p), torch.zeros(())
    g = sparse_grads(torch.float32, 1)[0]
    kwargs = dict(lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, maximize=False)
    bad = [
        (([p], [g.to_dense()], [m], [v], [s]), "grads\\[0\\] must be a sparse COO tensor"),
        (([p], [g.double()], [m], [v], [s]), "grads\\[0\\] has dtype Double"),
        (([p.t()], [g], [m.t()], [v.t()], [s]), "params\\[0\\] must be contiguous"),
        (([p], [g, g], [m], [v], [s]), "expected 1 grads"),
        (([p], [g], [m[:3]], [v], [s]), "exp_avgs"),
    ]
    before = [t.clone() for t in (p, m, v, s)]
    for args, message in bad:
        with pytest.raises(RuntimeError, match=message):
            torch.ops.gilfree_optim.sparse_adam_(*args, **kwargs)
        for t, b in zip((p, m, v, s), before):
            assert torch.equal(t, b)
    with pytest.raises(RuntimeError, match="must be a sparse COO tensor"):
        torch.ops.gilfree_optim.sparse_sgd_([p], [g.to_dense()], lr=0.1, maximize=False)
    with pytest.raises(RuntimeError, match="must be a sparse COO tensor"):
        torch.ops.gilfree_optim.sparse_adagrad_([p], [g.to_dense()], [m], [s], lr=0.1, lr_decay=0.0, eps=1e-10,
                                                maximize=False)
    assert torch.equal(p, before[0])


def test_sparse_kernel_touches_only_the_rows_present():
    p = torch.randn(1000, 16)
    m, v, s = torch.zeros_like(p), torch.zeros_like(p), torch.zeros(())
    rows = torch.tensor([[3, 500, 999, 3]])
    g = torch.sparse_coo_tensor(rows, torch.randn(4, 16), p.shape)
    before = p.clone()
    torch.ops.gilfree_optim.sparse_adam_([p], [g], [m], [v], [s], lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8,
                                         maximize=False)
    changed = (p != before).any(dim=1).nonzero().flatten().tolist()
    assert changed == [3, 500, 999]
    assert (m != 0).any(dim=1).nonzero().flatten().tolist() == [3, 500, 999]


# ----------------------------------------------------------------------------- native


def test_native_local_optimizer_steps_sparse_adam_like_functional_optim():
    """plugin.optim.NativeLocalOptimizer over SparseAdam: the same kernel as the eager instance
    (bitwise), torch's dense-gradient error before any change, state_dict with int steps."""
    from plugin.optim import NativeLocalOptimizer

    assert NativeLocalOptimizer.why_not_native(F.SparseAdam, base_params(torch.float32), lr=0.01) is None
    base = base_params(torch.float32)
    native_params = [b.clone() for b in base]
    eager_params = [b.clone() for b in base]
    native = NativeLocalOptimizer(F.SparseAdam, native_params, lr=0.01, maximize=True)
    eager = F.SparseAdam(eager_params, lr=0.01, maximize=True)
    assert native.accepts_sparse()
    for a, b in zip(sparse_grads(torch.float32, 1), sparse_grads(torch.float32, 2)):
        native.step_gradients([a, b])
        eager.step([a, b])
    for n, e in zip(native_params, eager_params):
        assert torch.equal(n, e)
    values = [p.clone() for p in native_params]
    with pytest.raises(RuntimeError, match="^SparseAdam does not support dense gradients, please consider Adam instead$"):
        native.step_gradients([sparse_grads(torch.float32, 3)[0], torch.ones_like(native_params[1])])
    for n, v in zip(native_params, values):
        assert torch.equal(n, v)
    theirs, mine = eager.state_dict(), native.state_dict()
    for i in range(2):
        assert mine["state"][i]["step"] == theirs["state"][i]["step"] == 6
        assert torch.equal(mine["state"][i]["exp_avg"], theirs["state"][i]["exp_avg"])
    assert mine["param_groups"] == theirs["param_groups"]
    # a non-contiguous parameter steps natively too: the group step takes it with torch's
    # composite ops (functional_optim/csrc/steps/sparse_adam.cpp), as the eager class does
    assert NativeLocalOptimizer.why_not_native(F.SparseAdam, [torch.randn(4, 3).t()]) is None


# ----------------------------------------------------------------------------- distributed


def test_distributed_sparse_adam_steps_natively_with_the_checked_step(cluster):
    """DistributedOptimizer(torch.optim.SparseAdam, ...) over embedding tables on two owners:
    each owner's local optimizer is native, every step after the plugin's backward pass is the
    checked step (one round trip: SparseAdam takes sparse gradients), and the tables equal
    torch.optim.SparseAdam's on the same lookups (duplicate rows included)."""
    import torch.distributed.autograd as dist_autograd
    import torch.distributed.rpc as rpc

    import plugin
    from plugin.optim import DistributedOptimizer
    from tests.support import optim_remote

    owners, names = ["worker1", "worker2"], ["sparse_adam_t1", "sparse_adam_t2"]
    rrefs = [rpc.rpc_sync(o, optim_remote.make_param, args=(n, (50, 4), 200 + i)) for i, (o, n) in enumerate(zip(owners, names))]
    local = [rpc.rpc_sync(o, optim_remote.param_value, args=(n,)).requires_grad_() for o, n in zip(owners, names)]
    opt = DistributedOptimizer(torch.optim.SparseAdam, rrefs, lr=0.05, betas=(0.8, 0.99))
    assert [owner.kind for owner in opt._owners.values()] == ["native", "native"]
    reference = torch.optim.SparseAdam(local, lr=0.05, betas=(0.8, 0.99))
    gen = torch.Generator().manual_seed(5)
    weight = torch.randn(4, dtype=torch.float64, generator=gen)

    def train(opt, steps):
        for step in range(steps):
            lookups = [torch.randint(0, 50, (7,), generator=gen) for _ in owners]
            for lookup in lookups:
                lookup[-1] = lookup[0]  # a duplicate row
            with dist_autograd.context() as ctx:
                rows = [rpc.rpc_sync(o, optim_remote.use_param_sparse, args=(idx, n)) for o, n, idx in zip(owners, names, lookups)]
                plugin.autograd.backward(ctx, [sum((r * weight).sum() for r in rows)])
                assert opt._checked_versions(ctx)  # the one-round-trip step covers the sparse gradients
                opt.step(ctx)
            reference.zero_grad()
            sum((torch.nn.functional.embedding(idx, p, sparse=True) * weight).sum() for p, idx in zip(local, lookups)).backward()
            reference.step()
        for o, n, p in zip(owners, names, local):
            torch.testing.assert_close(rpc.rpc_sync(o, optim_remote.param_value, args=(n,)), p.detach(), **PARAM_TOL[torch.float64])

    train(opt, 3)
    state = opt.state_dict()
    assert state["state"][0]["step"] == 3 and type(state["state"][0]["step"]) is int
    # torch's own state dict (its int steps) loads into a fresh one, which continues as torch's
    fresh = DistributedOptimizer(torch.optim.SparseAdam, rrefs, lr=1.0)
    fresh.load_state_dict(reference.state_dict())
    train(fresh, 2)
    assert fresh.state_dict()["state"][1]["step"] == 5


@pytest.mark.parametrize("lr_dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_distributed_sparse_adam_with_a_tensor_lr_and_a_scheduler_equals_torch_bitwise(cluster, lr_dtype):
    """A Tensor lr through a DistributedOptimizer over native owners, changed by a scheduler
    between steps (in place, as torch's schedulers change a Tensor lr): its param_groups show
    the Tensor as torch.optim's do, the owners follow its new value as a Tensor, and the
    float64 tables equal torch.optim.SparseAdam's element by element (torch computes the step
    size in the Tensor's dtype; a Python float instead is ~1e-10 off)."""
    import torch.distributed.autograd as dist_autograd
    import torch.distributed.rpc as rpc

    import plugin
    from plugin.optim import DistributedOptimizer
    from tests.support import optim_remote

    owner, name = "worker1", f"sparse_adam_tensor_lr_{str(lr_dtype)[6:]}"
    rref = rpc.rpc_sync(owner, optim_remote.make_param, args=(name, (20, 3), 7))
    local = rpc.rpc_sync(owner, optim_remote.param_value, args=(name,)).requires_grad_()
    opt = DistributedOptimizer(torch.optim.SparseAdam, [rref], lr=torch.tensor(0.01, dtype=lr_dtype))
    reference = torch.optim.SparseAdam([local], lr=torch.tensor(0.01, dtype=lr_dtype))
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor) and opt.param_groups[0]["lr"].dtype == lr_dtype
    schedulers = [torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5) for o in (opt, reference)]
    gen = torch.Generator().manual_seed(0)
    for step in range(5):
        idx = torch.randint(0, 20, (5,), generator=gen)
        with dist_autograd.context() as ctx:
            rows = rpc.rpc_sync(owner, optim_remote.use_param_sparse, args=(idx, name))
            plugin.autograd.backward(ctx, [(rows * rows).sum()])
            opt.step(ctx)
        reference.zero_grad()
        (torch.nn.functional.embedding(idx, local, sparse=True) ** 2).sum().backward()
        reference.step()
        for scheduler in schedulers:
            scheduler.step()
        assert torch.equal(opt.param_groups[0]["lr"], reference.param_groups[0]["lr"])
        assert torch.equal(rpc.rpc_sync(owner, optim_remote.param_value, args=(name,)), local.detach()), step
