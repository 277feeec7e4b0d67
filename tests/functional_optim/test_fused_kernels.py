"""This package's CPU kernels (``torch.ops.gilfree_optim.<name>_``: the optimizers torch has no
fused kernel for; SGD's, Adam's, AdamW's and Adagrad's group steps run torch's) against torch.optim.

* float32 / float64: 50 steps of the op and of ``torch.optim.<Class>(foreach=False)`` (the
  single-tensor reference) from the same start, every parameter and state tensor compared
  element by element after steps 1-3, 10, 20, ..., 50 (float64 rtol 1e-10; float32 rtol 1e-5; atol 1e-12 / 1e-6 times
  the tensor's largest magnitude when above 1),
  for each optimizer's flag combinations.
* bfloat16 / float16 parameters (float32 math): each step of the op is compared with one
  float32 single-tensor torch step from the same (reduced-precision) state, rounded back.
* Bad arguments raise errors naming the list and index before anything is mutated.
* ``torch.library.opcheck`` (schema, fake/meta kernel, dispatch) on sample inputs.
"""
import itertools
from typing import Any, Dict, List

import pytest
import torch

from functional_optim import _kernels

pytestmark = pytest.mark.timeout(600)

# Shapes: a matrix, a vector, a scalar, an odd-sized vector (scalar tail), and a tensor
# large enough that the step is split across threads inside it.
SHAPES = [(4, 3), (5,), (), (67,), (130, 257)]
STEPS = 50


def _combos(**options: List[Any]) -> List[Dict[str, Any]]:
    keys = list(options)
    return [dict(zip(keys, values)) for values in itertools.product(*(options[k] for k in keys))]


# name -> (torch class, list of constructor kwargs)
CASES: Dict[str, Any] = {
    "rmsprop": (torch.optim.RMSprop, [
        {"lr": 0.01, **c}
        for c in _combos(centered=[False, True], momentum=[0.0, 0.9], weight_decay=[0.0, 0.1], maximize=[False, True])
    ]),
    "adamax": (torch.optim.Adamax, [
        {"lr": 0.01, **c} for c in _combos(weight_decay=[0.0, 0.1], maximize=[False, True])
    ] + [{"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-3}]),
    "adadelta": (torch.optim.Adadelta, [
        {"lr": 1.0, **c} for c in _combos(weight_decay=[0.0, 0.1], maximize=[False, True])
    ] + [{"lr": 0.5, "rho": 0.5, "eps": 1e-4}]),
    "rprop": (torch.optim.Rprop, [
        {"lr": 0.01, **c} for c in _combos(maximize=[False, True])
    ] + [{"lr": 0.01, "etas": (0.3, 1.5), "step_sizes": (1e-4, 0.02)}]),
    "nadam": (torch.optim.NAdam, [
        {"lr": 0.01, **c}
        for c in _combos(weight_decay=[0.0, 0.1], decoupled_weight_decay=[False, True], maximize=[False, True])
    ] + [{"lr": 0.01, "momentum_decay": 0.01}]),
    "radam": (torch.optim.RAdam, [
        {"lr": 0.01, **c}
        for c in _combos(weight_decay=[0.0, 0.1], decoupled_weight_decay=[False, True], maximize=[False, True])
    ]),
    # t0 below the run's length: the average (mu < 1) starts within it
    "asgd": (torch.optim.ASGD, [
        {"lr": 0.05, **c} for c in _combos(weight_decay=[0.0, 0.1], maximize=[False, True], t0=[1e6, 5.0])
    ] + [{"lr": 0.02, "lambd": 0.01, "alpha": 0.5, "t0": 2.0}]),
}


def _case_ids():
    return [(name, i) for name, (_, configs) in CASES.items() for i in range(len(configs))]


def init_state(name: str, p: torch.Tensor, kw: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """The state torch.optim creates for ``p`` before its first step."""
    step = torch.tensor(0.0)
    z = lambda: torch.zeros_like(p, memory_format=torch.preserve_format)  # noqa: E731
    if name == "rmsprop":
        s = {"step": step, "square_avg": z()}
        if kw.get("momentum", 0.0) > 0:
            s["momentum_buffer"] = z()
        if kw.get("centered", False):
            s["grad_avg"] = z()
        return s
    if name == "adamax":
        return {"step": step, "exp_avg": z(), "exp_inf": z()}
    if name == "adadelta":
        return {"step": step, "square_avg": z(), "acc_delta": z()}
    if name == "rprop":
        return {"step": step, "prev": z(), "step_size": torch.full_like(p, kw["lr"])}
    if name == "nadam":
        return {"step": step, "mu_product": torch.tensor(1.0), "exp_avg": z(), "exp_avg_sq": z()}
    if name == "radam":
        return {"step": step, "exp_avg": z(), "exp_avg_sq": z()}
    if name == "asgd":
        return {"step": step, "eta": torch.tensor(kw["lr"]), "mu": torch.tensor(1.0), "ax": z()}
    raise KeyError(name)


def call_op(name: str, params, grads, states, kw: Dict[str, Any], first_step: bool = False) -> None:
    """One fused step with torch.optim's hyperparameter names and defaults."""
    op = _kernels.op_for(name)
    col = lambda key: [s[key] for s in states] if states and key in states[0] else []  # noqa: E731
    wd = kw.get("weight_decay", 0.0)
    maximize = kw.get("maximize", False)
    betas = kw.get("betas", (0.9, 0.999))
    if name == "rmsprop":
        op(params, grads, col("square_avg"), col("grad_avg"), col("momentum_buffer"), col("step"), lr=kw["lr"],
           alpha=kw.get("alpha", 0.99), eps=kw.get("eps", 1e-8), weight_decay=wd, momentum=kw.get("momentum", 0.0),
           centered=kw.get("centered", False), maximize=maximize)
    elif name == "adamax":
        op(params, grads, col("exp_avg"), col("exp_inf"), col("step"), lr=kw["lr"], beta1=betas[0],
           beta2=betas[1], eps=kw.get("eps", 1e-8), weight_decay=wd, maximize=maximize)
    elif name == "adadelta":
        op(params, grads, col("square_avg"), col("acc_delta"), col("step"), lr=kw["lr"], rho=kw.get("rho", 0.9),
           eps=kw.get("eps", 1e-6), weight_decay=wd, maximize=maximize)
    elif name == "rprop":
        etas = kw.get("etas", (0.5, 1.2))
        sizes = kw.get("step_sizes", (1e-6, 50.0))
        op(params, grads, col("prev"), col("step_size"), col("step"), step_size_min=sizes[0],
           step_size_max=sizes[1], etaminus=etas[0], etaplus=etas[1], maximize=maximize)
    elif name == "nadam":
        op(params, grads, col("exp_avg"), col("exp_avg_sq"), col("mu_product"), col("step"), lr=kw["lr"],
           beta1=betas[0], beta2=betas[1], weight_decay=wd, momentum_decay=kw.get("momentum_decay", 4e-3),
           eps=kw.get("eps", 1e-8), decoupled_weight_decay=kw.get("decoupled_weight_decay", False),
           maximize=maximize)
    elif name == "radam":
        op(params, grads, col("exp_avg"), col("exp_avg_sq"), col("step"), lr=kw["lr"], beta1=betas[0],
           beta2=betas[1], weight_decay=wd, eps=kw.get("eps", 1e-8),
           decoupled_weight_decay=kw.get("decoupled_weight_decay", False), maximize=maximize)
    elif name == "asgd":
        op(params, grads, col("ax"), col("mu"), col("eta"), col("step"), lambd=kw.get("lambd", 1e-4), lr=kw["lr"],
           t0=kw.get("t0", 1e6), alpha=kw.get("alpha", 0.75), weight_decay=wd, maximize=maximize)
    else:
        raise KeyError(name)


def _grads(step: int, shapes, dtype) -> List[torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + step)
    out = []
    for s in shapes:
        g = torch.randn(s, generator=gen, dtype=torch.float64)
        if step % 7 == 3:
            g = g * 0  # zero gradients (Rprop's sign == 0 branch)
        out.append(g.to(dtype))
    return out


def _params(shapes, dtype) -> List[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in shapes]


def _assert_close(actual, expected, rtol, atol, what):
    # atol is scaled by the tensor's largest magnitude (at least 1): a running sum whose terms
    # cancel (a momentum buffer near zero) can only be as exact as the ulp of its largest terms.
    scale = max(1.0, float(expected.detach().abs().max())) if expected.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol * scale, msg=lambda m: f"{what}: {m}")


@pytest.fixture(scope="module", autouse=True)
def _library():
    if not _kernels.available():
        pytest.fail(f"the op library with the fused kernels did not load: {_kernels.default_error()}")
    # One intra-op thread: torch's reference steps are many small ops, which crawl when the
    # machine is shared; the split across threads is tested on its own below.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", list(CASES))
def test_split_across_threads_is_exact(name):
    """The step is elementwise: 4 threads (pieces crossing tensor boundaries) give the 1-thread bits."""
    _, configs = CASES[name]
    kw = configs[-1]
    shapes = [(70_001,), (3,), (40_000,), (65,), (5, 7)] + [(1000,)] * 30
    results = []
    for threads in (1, 4):
        torch.set_num_threads(threads)
        try:
            ours = _params(shapes, torch.float32)
            states = [init_state(name, p, kw) for p in ours]
            for step in range(3):
                call_op(name, ours, _grads(step, shapes, torch.float32), states, kw, first_step=step == 0)
        finally:
            torch.set_num_threads(1)
        results.append((ours, states))
    (p1, s1), (p4, s4) = results
    for i in range(len(shapes)):
        assert torch.equal(p1[i], p4[i]), f"params[{i}]"
        for key in s1[i]:
            assert torch.equal(s1[i][key], s4[i][key]), f"{key}[{i}]"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name,index", _case_ids(), ids=[f"{n}-{i}" for n, i in _case_ids()])
def test_matches_torch_single_tensor(name, index, dtype):
    torch_class, configs = CASES[name]
    kw = configs[index]
    rtol, atol = (1e-10, 1e-12) if dtype == torch.float64 else (1e-5, 1e-6)
    ours = _params(SHAPES, dtype)
    states = [init_state(name, p, kw) for p in ours]
    ref = [torch.nn.Parameter(p.clone()) for p in ours]
    opt = torch_class(ref, foreach=False, **kw)
    for step in range(STEPS):
        grads = _grads(step, SHAPES, dtype)
        for r, g in zip(ref, grads):
            r.grad = g.clone()
        opt.step()
        call_op(name, ours, grads, states, kw, first_step=step == 0)
        if step % 10 != 9 and step > 2:
            continue
        for i, (p, r) in enumerate(zip(ours, ref)):
            _assert_close(p, r.detach(), rtol, atol, f"{name} {kw} step {step + 1} params[{i}]")
            for key, value in states[i].items():
                _assert_close(value, opt.state[r][key], rtol, atol, f"{name} {kw} step {step + 1} {key}[{i}]")


def _torch_step_float32(name, kw, param, grad, state, first_step):
    """One float32 single-tensor torch.optim step from upcast copies; results rounded back."""
    torch_class, _ = CASES[name]
    p32 = torch.nn.Parameter(param.float())
    p32.grad = grad.float()
    opt = torch_class([p32], foreach=False, **kw)
    st = {k: (v.float() if v.dim() > 0 or k not in ("step", "mu_product") else v.clone()) for k, v in state.items()}
    if st:
        opt.state[p32] = st
    opt.step()
    new_state = {k: opt.state[p32][k].to(state[k].dtype) for k in state}
    return p32.detach().to(param.dtype), new_state


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("name", list(CASES))
def test_reduced_precision_uses_float32_math(name, dtype):
    torch_class, configs = CASES[name]
    # Half precision has ~3 decimal digits: one rounding step of difference is allowed.
    rtol = 2 ** -7 if dtype == torch.bfloat16 else 2 ** -10
    for kw in configs[:4]:
        ours = _params(SHAPES, dtype)
        states = [init_state(name, p, kw) for p in ours]
        for step in range(5):
            grads = _grads(step, SHAPES, dtype)
            expected = [
                _torch_step_float32(name, kw, p, g, s, step == 0) for p, g, s in zip(ours, grads, states)
            ]
            call_op(name, ours, grads, states, kw, first_step=step == 0)
            for i, (p, (ep, es)) in enumerate(zip(ours, expected)):
                assert p.dtype == dtype
                _assert_close(p.float(), ep.float(), rtol, 1e-3, f"{name} {kw} {dtype} step {step + 1} params[{i}]")
                for key in es:
                    _assert_close(
                        states[i][key].float(), es[key].float(), rtol, 1e-3,
                        f"{name} {kw} {dtype} step {step + 1} {key}[{i}]",
                    )


def _sample(name: str, dtype=torch.float32, shapes=((3, 2), (7,))):
    kw = CASES[name][1][-1]
    params = _params(list(shapes), dtype)
    grads = _grads(0, list(shapes), dtype)
    states = [init_state(name, p, kw) for p in params]
    return kw, params, grads, states


@pytest.mark.parametrize("name", list(CASES))
def test_errors_name_the_argument_and_mutate_nothing(name):
    kw, params, grads, states = _sample(name)
    before = [p.clone() for p in params]
    steps_before = [s.get("step", torch.tensor(0.0)).clone() for s in states]
    bad = [grads[0], grads[1].double()]
    with pytest.raises(RuntimeError, match=r"grads\[1\] has dtype Double but params\[1\] has dtype Float"):
        call_op(name, params, bad, states, kw)
    with pytest.raises(RuntimeError, match=r"grads has 1 tensors but params has 2"):
        call_op(name, params, grads[:1], states, kw)
    bad = [grads[0], grads[1][:3]]
    with pytest.raises(RuntimeError, match=r"grads\[1\] has shape \[3\] but params\[1\] has shape \[7\]"):
        call_op(name, params, bad, states, kw)
    sparse = [grads[0], grads[1].to_sparse()]
    # The dispatcher rejects it (no sparse kernel), naming the op and the sparse backend.
    with pytest.raises(NotImplementedError, match=rf"gilfree_optim::{name}_' with arguments from the 'SparseCPU'"):
        call_op(name, params, sparse, states, kw)
    ints = [torch.zeros(3, 2, dtype=torch.int64), torch.zeros(7, dtype=torch.int64)]
    with pytest.raises(RuntimeError, match=r"params\[0\] has dtype Long"):
        call_op(name, ints, [g.long() for g in grads], [init_state(name, p.float(), kw) for p in ints], kw)
    for p, b in zip(params, before):
        assert torch.equal(p, b)
    for s, b in zip(states, steps_before):
        if "step" in s:
            assert torch.equal(s["step"], b)


def test_state_list_of_wrong_length_is_rejected():
    kw = {"lr": 0.01, "momentum": 0.9}
    params = _params([(3, 2), (7,)], torch.float32)
    grads = _grads(0, [(3, 2), (7,)], torch.float32)
    states = [init_state("rmsprop", p, kw) for p in params]
    with pytest.raises(RuntimeError, match=r"momentum > 0 needs one momentum_buffers tensor per parameter"):
        torch.ops.gilfree_optim.rmsprop_(
            params, grads, [s["square_avg"] for s in states], [], [], [s["step"] for s in states], lr=0.1,
            alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.9, centered=False, maximize=False)
    with pytest.raises(RuntimeError, match=r"state_steps\[0\] must be a one-element tensor"):
        torch.ops.gilfree_optim.rmsprop_(
            params, grads, [s["square_avg"] for s in states], [], [s["momentum_buffer"] for s in states],
            [torch.zeros(2), torch.zeros(())], lr=0.1, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.9,
            centered=False, maximize=False)


def test_non_contiguous_gradient_is_read_correctly():
    """A gradient with other strides than its parameter (a transposed view) is copied, not misread."""
    kw = {"lr": 0.01}
    p = _params([(6, 5)], torch.float64)[0]
    g = torch.randn(5, 6, dtype=torch.float64).t()
    state = init_state("radam", p, kw)
    ref = torch.nn.Parameter(p.clone())
    ref.grad = g.contiguous()
    torch.optim.RAdam([ref], foreach=False, **kw).step()
    call_op("radam", [p], [g], [state], kw)
    torch.testing.assert_close(p, ref.detach(), rtol=1e-10, atol=0)


def test_ops_are_scriptable():
    @torch.jit.script
    def step(params: List[torch.Tensor], grads: List[torch.Tensor], m: List[torch.Tensor], v: List[torch.Tensor],
             steps: List[torch.Tensor]) -> None:
        torch.ops.gilfree_optim.radam_(params, grads, m, v, steps, lr=0.01, beta1=0.9, beta2=0.999,
                                       weight_decay=0.0, eps=1e-8, decoupled_weight_decay=False, maximize=False)

    kw = {"lr": 0.01}
    p = _params([(8,)], torch.float32)
    ref = torch.nn.Parameter(p[0].clone())
    opt = torch.optim.RAdam([ref], foreach=False, **kw)
    st = init_state("radam", p[0], kw)
    for i in range(8):
        g = _grads(i, [(8,)], torch.float32)
        ref.grad = g[0].clone()
        opt.step()
        step(p, g, [st["exp_avg"]], [st["exp_avg_sq"]], [st["step"]])
    torch.testing.assert_close(p[0], ref.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(CASES))
def test_opcheck(name):
    for dtype in (torch.float32, torch.bfloat16):
        kw, params, grads, states = _sample(name, dtype)
        captured = {}

        def capture(*args, **kwargs):
            captured["args"], captured["kwargs"] = args, kwargs

        real = _kernels.op_for
        try:
            _kernels.op_for = lambda n: capture  # record the arguments call_op builds
            call_op(name, params, grads, states, kw, first_step=True)
        finally:
            _kernels.op_for = real
        torch.library.opcheck(_kernels.op_for(name), captured["args"], captured["kwargs"])
