"""plugin.nn.RemoteModule built as torch's RemoteModule is (``RemoteModule(remote_device,
module_cls, args, kwargs)``, no example inputs): programs exported at each call key's first
forward, against the same module run eagerly in one process (outputs with their Python types,
input gradients, parameters after Adam steps), with non-tensor and keyword arguments, a batch
of 1 first, the bound of the programs' cache, the Python path where torch.export cannot capture
(and ``fullgraph=True`` raising, the module unchanged), and the first calls of two trainers at
once; on a real RPC group (the test process is worker0, the modules live on worker1)."""
import warnings

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin.autograd
from plugin.nn import RemoteModule, _owner
from plugin.optim import DistributedOptimizer
from tests.support import nn_modules as mods

TOL = dict(rtol=1e-6, atol=1e-6)

pytestmark = pytest.mark.timeout(120)


def local_twin(remote, cls, *args):
    twin = cls(*args)
    twin.load_state_dict(rpc.rpc_sync(remote.on, mods.state, args=(remote.module_rref,)))
    return twin


def tensors(tree):
    return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def loss_of(out):
    total = 0
    for i, t in enumerate(tensors(out)):
        if t.is_floating_point():
            total = total + (t * torch.linspace(-1, 1, t.numel()).reshape(t.shape) * (i + 1)).sum()
    return total


def assert_same(got, want):
    """Equal trees: the same containers and Python types, tensors within TOL."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got.detach(), want.detach(), **TOL)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            assert_same(got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert_same(a, b)
    else:
        assert got == want


def train_both(remote, twin, calls):
    """Each call (args, kwargs) once through the remote module (forward, the plugin's backward,
    a DistributedOptimizer Adam step) and once eagerly; compares outputs, input gradients and
    the owner's state with the twin's after each step."""
    opt = DistributedOptimizer(torch.optim.Adam, remote.remote_parameters(), lr=0.01)
    local_opt = torch.optim.Adam(twin.parameters(), lr=0.01)
    for step, (args, kwargs) in enumerate(calls):
        grad = lambda tree: torch.utils._pytree.tree_map_only(  # noqa: E731
            torch.Tensor, lambda t: t.clone().requires_grad_(t.is_floating_point()), tree)
        a, b = grad((args, kwargs)), grad((args, kwargs))
        with dist_autograd.context() as ctx:
            out = remote(*a[0], **a[1])
            plugin.autograd.backward(ctx, [loss_of(out)])
            grads = plugin.autograd.get_gradients(ctx)
            opt.step(ctx)
        local_opt.zero_grad()
        want = twin(*b[0], **b[1])
        loss_of(want).backward()
        local_opt.step()
        assert_same(out, want)
        for x, y in zip(tensors(a), tensors(b)):
            if y.requires_grad:
                torch.testing.assert_close(grads[x], y.grad, **TOL)
        now = rpc.rpc_sync(remote.on, mods.state, args=(remote.module_rref,))
        for name, value in twin.state_dict().items():
            torch.testing.assert_close(now[name], value, **TOL, msg=f"{name} after step {step}")


def test_torchs_constructor_trains_as_eager_from_a_first_batch_of_1(cluster):
    """No example inputs: the first forward (a batch of 1) exports one program, whose batch
    dimension is dynamic: batches of 4, 1 and 7 run it (one program), and training equals eager."""
    remote = RemoteModule("worker1/cpu", mods.MLP, ((6, 8, 8, 3),), {"seed": 3})
    assert remote.native and remote.reason is None
    twin = local_twin(remote, mods.MLP, (6, 8, 8, 3))
    train_both(remote, twin, [((torch.randn(b, 6),), {}) for b in (1, 4, 1, 7)])
    info = remote._debug_info()
    assert info["programs"] == 1 and info["forwards"] == 4, info
    assert remote.native


def test_non_tensor_and_keyword_arguments_and_results(cluster):
    """int, float, str, bool, None, dicts and lists, positional and keyword, the forward's
    defaults: results with their Python types (the batch size an int, the str a str), training
    equal to eager; one program per combination of non-tensor values."""
    remote = RemoteModule("worker1/cpu", mods.Mixed, (), {"seed": 2})
    twin = local_twin(remote, mods.Mixed)
    extra = {"bias": torch.randn(4), "weights": [torch.randn(4)]}
    calls = [
        ((torch.randn(4, 6), 2), {}),
        ((torch.randn(5, 6), 2), {}),  # the same key: the same program
        ((torch.randn(3, 6), 1, 2.0, "max"), {"flip": True}),
        ((torch.randn(3, 6), 3), {"word": "max", "extra": extra, "parts": [torch.randn(4), torch.randn(3, 4)]}),
    ]
    train_both(remote, twin, calls)
    out = remote(torch.randn(6, 6), 2)
    assert type(out["rows"]) is int and out["rows"] == 6 and out["word"] == "sum" and out["scale"] == 0.5
    assert out["pair"][1] == [2, None]
    info = remote._debug_info()
    assert info["programs"] == 3 and remote.native, (info, remote.reason)


def test_eval_mode_is_a_key_of_its_own(cluster):
    """eval() on the owner too; the eval call exports the eval program (BatchNorm's running
    statistics read, not written), train() goes back to the train program."""
    remote = RemoteModule("worker1/cpu", mods.Mixed)
    twin = local_twin(remote, mods.Mixed)
    x = torch.randn(4, 6)
    assert_same(remote(x, 1), twin(x, 1))
    remote.eval()
    twin.eval()
    assert not rpc.rpc_sync("worker1", mods.owner_training, args=(remote.module_rref,))
    assert_same(remote(x, 1), twin(x, 1))
    remote.train()
    twin.train()
    assert_same(remote(x, 1), twin(x, 1))
    assert remote._debug_info()["programs"] == 2


def test_a_bad_input_names_the_owner_the_module_and_the_argument(cluster):
    remote = RemoteModule("worker1/cpu", mods.Mixed)
    remote(torch.randn(4, 6), 1, extra={"bias": torch.randn(4), "weights": [torch.randn(4)]})
    with pytest.raises(ValueError) as raised:  # the program's input check, before anything runs
        remote(torch.randn(4, 6), 1, extra={"bias": torch.randn(5), "weights": [torch.randn(4)]})
    text = str(raised.value)
    assert "RemoteModule.forward" in text and "'worker1'" in text and "Mixed" in text, text
    assert "extra['bias']" in text, text


def test_the_programs_cache_is_bounded(cluster):
    """Past PROGRAM_CACHE_BOUND keys, a call runs by the Python path (one warning), as eager."""
    remote = RemoteModule("worker1/cpu", mods.Mixed)
    twin = local_twin(remote, mods.Mixed)
    x = torch.randn(3, 6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(_owner.PROGRAM_CACHE_BOUND + 2):
            assert_same(remote(x, 0, float(i)), twin(x, 0, float(i)))
    said = [w for w in caught if "Python path" in str(w.message)]
    assert len(said) == 1 and "programs already" in str(said[0].message), [str(w.message) for w in caught]
    assert not remote.native and "programs already" in remote.reason
    assert remote._debug_info()["programs"] == _owner.PROGRAM_CACHE_BOUND


def test_what_export_cannot_capture_runs_in_python_or_fullgraph_raises(cluster):
    """Data-dependent control flow: the first forward warns once, runs the Python forward (as
    eager, gradients to the owner), .native False and .reason torch.export's; with fullgraph the
    first forward raises naming the module, the owner and torch.export's reason, and the module
    is as it was (still in train mode, no program, the next call raises the same)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        remote = RemoteModule("worker1/cpu", mods.DataDependent)
        twin = local_twin(remote, mods.DataDependent)
        for _ in range(3):
            x = torch.randn(2, 3, requires_grad=True)
            with dist_autograd.context() as ctx:
                out = remote(x)
                plugin.autograd.backward(ctx, [out.sum()])
                grad = plugin.autograd.get_gradients(ctx)[x]
            y = x.detach().clone().requires_grad_(True)
            twin(y).sum().backward()
            torch.testing.assert_close(out, twin(x).detach(), **TOL)
            torch.testing.assert_close(grad, y.grad, **TOL)
    assert len([w for w in caught if "Python path" in str(w.message)]) == 1
    assert not remote.native and "torch.export.export failed" in remote.reason

    strict = RemoteModule("worker1/cpu", mods.DataDependent, fullgraph=True)
    for _ in range(2):
        with pytest.raises(RuntimeError) as raised:
            strict(torch.randn(2, 3))
        text = str(raised.value)
        assert "DataDependent cannot run natively: torch.export.export failed" in text and "'worker1'" in text, text
    assert rpc.rpc_sync("worker1", mods.owner_training, args=(strict.module_rref,))
    assert strict._debug_info() == {}


def test_two_trainers_first_calls_at_once_export_once(cluster):
    """The module pickled to worker2 and worker3, whose first forwards (of one key) run at once:
    one export, both answers eager's."""
    remote = RemoteModule("worker1/cpu", mods.Mixed)
    twin = local_twin(remote, mods.Mixed)
    futures = [rpc.rpc_async(w, mods.first_forwards, args=(remote, seed))
               for w, seed in (("worker2", 1), ("worker3", 2))]
    for fut, seed in zip(futures, (1, 2)):
        torch.manual_seed(seed)
        torch.testing.assert_close(fut.wait()[0], twin(torch.randn(3, 6), 2, word="max")["out"], **TOL)
    assert remote._debug_info()["programs"] == 1


def test_torchs_suite_module_runs_natively(cluster):
    """torch's suite's module (non-tensor arguments and results, its output an input) runs
    natively, from a first batch of 1, positional and keyword."""
    remote = RemoteModule("worker1/cpu", mods.Identity3, (1,), {"first_kwarg": 2})
    assert remote(torch.ones(1), 2, "3") == ("3", 2, torch.ones(1))
    out = remote.forward_async(torch.ones(3), 2, word="x")
    assert isinstance(out, torch.futures.Future)
    word, number, tensor = out.wait()
    assert word == "x" and number == 2 and torch.equal(tensor, torch.ones(3))
    assert remote.native, remote.reason
