"""A group's state packed into a few buffers (``GroupedState.pack``): its state tensors are
views of one buffer per dtype, so that a step hands the op library those buffers instead of
every state tensor (``gilfree_optim::group_step_packed``).

Packed where nothing holds the tensors it would replace: when the whole group's state is made
at once (its first step, or Adagrad's constructor) or loaded. The results equal torch.optim's
(parity with every parameter stepped from the first step, eagerly and scripted) and the list
path's bitwise; the state tensors are the same objects from step to step, as torch keeps them,
also when a key is added later (the group then steps by the list again).
"""
import io

import pytest
import torch

import functional_optim
from functional_optim import ops
from tests.support import optim_configs as C
from tests.support.optim_helpers import run_compiled_against_eager, run_parity

pytestmark = pytest.mark.timeout(600)

FUSED = list(C.INFOS)  # every optimizer's default implementation is its group step
DENSE = [info for info in FUSED if info.name != "SparseAdam"]
# What makes a state to pack (SGD keeps none without momentum).
STATEFUL = {"SGD": {"momentum": 0.9}}


def _stepped(info, steps=1, seed=7, **kwargs):
    """Ours over the info's parameters, every parameter stepped from the first step."""
    params = C.make_params(torch.float32, info=info)
    opt = info.ours(params, **{**info.configs[0].kwargs, **STATEFUL.get(info.name, {}), **kwargs})
    gen = torch.Generator().manual_seed(seed)
    sparse = info.name == "SparseAdam"
    for k in range(steps):
        opt.step(C.make_gradients(k, torch.float32, gen, sparse=sparse, late_start=False, info=info))
    return opt, params, gen


def _buffers_hold(opt, state):
    storages = {b.untyped_storage().data_ptr() for b in opt._s.packed[0]}
    return all(t.untyped_storage().data_ptr() in storages for entry in state.values() for t in entry.values())


@pytest.mark.parametrize("info", FUSED, ids=str)
def test_packed_parity_with_torch(info):
    """Every parameter stepped from the first step: the default (fused) implementation packs
    the state, and eager and scripted steps stay equal to torch.optim's."""
    run_parity(info, info.configs[0], None, torch.float32, sparse=info.name == "SparseAdam", late_start=False)


@pytest.mark.parametrize("info", FUSED, ids=str)
def test_state_is_packed_and_stays_the_same_tensors(info):
    opt, _, gen = _stepped(info)
    assert len(opt._s.packed[0]) > 0, "not packed"
    before = opt.state_dict()["state"]
    assert before and _buffers_hold(opt, before)
    values = {i: {k: v.clone() for k, v in entry.items()} for i, entry in before.items()}
    sparse = info.name == "SparseAdam"
    opt.step(C.make_gradients(1, torch.float32, gen, sparse=sparse, late_start=False, info=info))
    after = opt.state_dict()["state"]
    changed = False
    for i, entry in after.items():
        for key, tensor in entry.items():
            assert tensor is before[i][key], (i, key)  # the same tensor, updated in place
            changed = changed or not torch.equal(tensor, values[i][key])
    assert changed


@pytest.mark.parametrize("info", FUSED, ids=str)
def test_packed_step_equals_list_step(info):
    """The packed op and the list op on the same state give the same bits."""
    a, pa, gen_a = _stepped(info)
    b, pb, gen_b = _stepped(info)
    b._s.unpack(0)
    sparse = info.name == "SparseAdam"
    for k in range(1, 6):
        a.step(C.make_gradients(k, torch.float32, gen_a, sparse=sparse, late_start=False, info=info))
        b.step(C.make_gradients(k, torch.float32, gen_b, sparse=sparse, late_start=False, info=info))
    assert len(a._s.packed[0]) > 0 and len(b._s.packed[0]) == 0
    for x, y in zip(pa, pb):
        assert torch.equal(x, y)
    sa, sb = a.state_dict()["state"], b.state_dict()["state"]
    for i in sa:
        for key in sa[i]:
            assert torch.equal(sa[i][key], sb[i][key]), (i, key)


def test_a_late_parameter_leaves_the_group_unpacked_and_the_state_live():
    info = C.INFO_BY_NAME["Adam"]
    params = C.make_params(torch.float32, info=info)
    opt = functional_optim.Adam(params, lr=0.01)
    gen = torch.Generator().manual_seed(3)
    opt.step(C.make_gradients(0, torch.float32, gen, info=info))  # parameter 2 starts late
    held = opt.state_dict()["state"][0]["exp_avg"]
    for k in range(1, 4):
        opt.step(C.make_gradients(k, torch.float32, gen, info=info))
    assert len(opt._s.packed[0]) == 0
    assert opt.state_dict()["state"][0]["exp_avg"] is held


def test_a_key_added_later_keeps_the_tensors_handed_out():
    """RMSprop's momentum set after the first step adds 'momentum_buffer': the group steps by
    the list from then on, and the tensors handed out before stay the state."""
    info = C.INFO_BY_NAME["RMSprop"]
    opt, params, gen = _stepped(info, momentum=0.0)
    assert len(opt._s.packed[0]) > 0
    held = opt.state_dict()["state"][0]["square_avg"]
    opt.set_hyperparameter(0, "momentum", 0.9)
    assert len(opt._s.packed[0]) == 0
    before = held.clone()
    opt.step(C.make_gradients(1, torch.float32, gen, late_start=False, info=info))
    state = opt.state_dict()["state"][0]
    assert "momentum_buffer" in state and state["square_avg"] is held and not torch.equal(held, before)


@pytest.mark.parametrize("info", [C.INFO_BY_NAME[n] for n in ("Adam", "ASGD", "Adafactor")], ids=str)
def test_loaded_state_is_packed_and_continues_as_before(info):
    """A state dict saved with torch.save (views of the buffers, their storages shared) loads
    into a new optimizer packed, which then steps as the original does."""
    opt, params, gen = _stepped(info, steps=2)
    blob = io.BytesIO()
    torch.save(opt.state_dict(), blob)
    blob.seek(0)
    params2 = [p.clone() for p in params]
    other = info.ours(params2, **{**info.configs[0].kwargs, **STATEFUL.get(info.name, {})})
    other.load_state_dict(torch.load(blob))
    assert len(other._s.packed[0]) > 0 and _buffers_hold(other, other.state_dict()["state"])
    for k in range(2, 5):
        grads = C.make_gradients(k, torch.float32, gen, late_start=False, info=info)
        opt.step(grads)
        other.step([None if g is None else g.clone() for g in grads])
    for x, y in zip(params, params2):
        assert torch.equal(x, y)


@pytest.mark.parametrize("info", DENSE, ids=str)
def test_compiled_packed_step_equals_eager(info):
    """Under torch.compile the first step makes and packs the state inside the graph; the
    steps after it pass the buffers."""
    config = C.Config("packed", {**info.configs[0].kwargs, **STATEFUL.get(info.name, {})})
    compiled = run_compiled_against_eager(info, config, late_start=False)
    assert len(compiled._s.packed[0]) > 0
    assert _buffers_hold(compiled, compiled.state_dict()["state"])


def test_the_op_checks_the_layout_before_stepping():
    opt, params, _ = _stepped(C.INFO_BY_NAME["Adam"])
    s = opt._s
    buffers = [b.clone() for b in s.packed[0]]
    saved = [p.clone() for p in params]
    grads = [torch.ones_like(p) for p in params]
    fresh = [False] * len(params)

    def call(layout, bufs=buffers):
        ops.group_step_packed(s.name, s.cache_params[0], grads, bufs, layout, fresh, s.op_names[0], s.op_values[0], [], [])

    good = s.layout[0].clone()
    past_end = good.clone()
    past_end[1] = buffers[int(good[0])].numel()  # the first tensor's offset at the buffer's end
    overlapping = good.clone()
    overlapping[1] = 0  # the first tensor's offset onto the second's (both at 0)
    overlapping[int(good[2]) + 4] = 0
    huge = good.clone()
    huge[2:3] = 2**62  # a dimension count past the layout's end
    for layout, match in [
        (good[:-1], "cut short|keeps"),
        (good.to(torch.int32), "int64"),
        (past_end, "reaches past"),
        (torch.cat([good[:1] + 5, good[1:]]), "names buffer"),
        (overlapping, "overlaps"),
        (huge, "cut short"),
    ]:
        with pytest.raises(ValueError, match=match):
            call(layout)
    for p, q in zip(params, saved):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="1-D"):
        call(good, [b.view(1, -1) for b in buffers])
    call(good)  # the good layout steps
    assert not torch.equal(params[0], saved[0])
    good[1] = buffers[int(good[0])].numel()  # the same layout tensor changed in place: checked again
    with pytest.raises(ValueError, match="reaches past"):
        call(good)


@pytest.mark.parametrize("name", ["Adam", "ASGD", "Adafactor"])
def test_a_packed_step_bumps_the_state_versions_as_the_list_step(name):
    """Version counters move as they do when the state tensors are passed one by one (torch's
    fused Adam kernel and the in-place ATen ops bump them, so that a saved state tensor is seen
    to have changed; this library's own element-wise kernels bump none, packed or not)."""
    info = C.INFO_BY_NAME[name]
    moved = []
    for unpacked in (False, True):
        opt, _, gen = _stepped(info)
        if unpacked:
            opt._s.unpack(0)
        state = opt.state_dict()["state"][0]
        versions = {key: t._version for key, t in state.items()}
        opt.step(C.make_gradients(1, torch.float32, gen, late_start=False, info=info))
        moved.append({key: t._version - versions[key] for key, t in state.items()})
    assert moved[0] == moved[1]
    if name != "ASGD":
        assert all(delta > 0 for delta in moved[0].values())


def test_packing_takes_the_state_device_not_the_default_one():
    """A default device set by the user (here meta) does not move the buffers off the CPU."""
    info = C.INFO_BY_NAME["Adam"]
    gen = torch.Generator().manual_seed(7)
    grads = [C.make_gradients(k, torch.float32, gen, late_start=False, info=info) for k in range(3)]
    params, params2 = C.make_params(torch.float32, info=info), C.make_params(torch.float32, info=info)
    eager, other = functional_optim.Adam(params, lr=0.01), functional_optim.Adam(params2, lr=0.01)
    for g in grads:
        eager.step(g)
        with torch.device("meta"):
            other.step(g)
    assert len(other._s.packed[0]) > 0 and other._s.packed[0][0].device.type == "cpu"
    for x, y in zip(params, params2):
        assert torch.equal(x, y)
