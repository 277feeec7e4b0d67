"""Named parameters (torch >= 2.6: ``optimizer(model.named_parameters())``) in functional_optim:
``param_names`` in param_groups and state_dict as torch.optim has them, torch's errors, and
state dicts with names loading across torch.optim and functional_optim."""
import pytest
import torch

import functional_optim


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))


def test_names_in_param_groups_and_state_dict_like_torch():
    m = model()
    ours = functional_optim.Adam(m.named_parameters(), lr=0.01)
    theirs = torch.optim.Adam(m.named_parameters(), lr=0.01)
    assert ours.param_groups[0]["param_names"] == theirs.param_groups[0]["param_names"] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert ours.state_dict()["param_groups"] == theirs.state_dict()["param_groups"]
    groups = lambda: [{"params": list(m[0].named_parameters())}, {"params": list(m[1].named_parameters()), "lr": 0.1}]
    ours = functional_optim.SGD(groups(), lr=0.01)
    theirs = torch.optim.SGD(groups(), lr=0.01)
    assert ours.state_dict()["param_groups"] == theirs.state_dict()["param_groups"]


@pytest.mark.parametrize("optimizer", [functional_optim.SGD, torch.optim.SGD], ids=["ours", "torch"])
def test_torchs_errors(optimizer):
    w, b = torch.zeros(2, requires_grad=True), torch.zeros(1, requires_grad=True)
    with pytest.raises(ValueError, match=r"^all optimizer params should be with/without names. Some param names are missing$"):
        optimizer([("weight", w), b], lr=0.1)
    with pytest.raises(ValueError, match=r"^all optimizer param groups should be with/without names. cannot add param group with names to the optimizer$"):
        optimizer([{"params": [w]}, {"params": [("bias", b)]}], lr=0.1)
    with pytest.raises(ValueError, match=r"without names to the optimizer$"):
        optimizer([{"params": [("weight", w)]}, {"params": [b]}], lr=0.1)


def test_state_dicts_with_names_load_across():
    m = model()
    named = torch.optim.SGD(m.named_parameters(), lr=0.01, momentum=0.9)
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    named.step()
    ours = functional_optim.SGD(list(m.parameters()), lr=0.5, momentum=0.9)
    ours.load_state_dict(named.state_dict())
    assert ours.param_groups[0]["param_names"] == named.param_groups[0]["param_names"]
    assert ours.state_dict()["param_groups"] == named.state_dict()["param_groups"]

    back = torch.optim.SGD(list(m.parameters()), lr=0.5, momentum=0.9)
    back.load_state_dict(ours.state_dict())
    assert back.param_groups[0]["param_names"] == named.param_groups[0]["param_names"]
    for i, entry in named.state_dict()["state"].items():
        assert torch.equal(back.state_dict()["state"][i]["momentum_buffer"], entry["momentum_buffer"])


# ----------------------------------------------------------------------------- add_param_group

@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
def test_add_param_group_like_torch(named):
    """add_param_group with and without names: the same param_groups, state_dict and steps as
    torch.optim (the new group takes the constructor's values it does not set)."""
    m = model()
    first = list(m[0].named_parameters()) if named else list(m[0].parameters())
    second = list(m[1].named_parameters()) if named else list(m[1].parameters())
    ours_params = {n: p.detach().clone() for n, p in m.named_parameters()}
    ours_first = [(n, ours_params["0." + n]) for n, _ in m[0].named_parameters()]
    ours_second = [(n, ours_params["1." + n]) for n, _ in m[1].named_parameters()]
    if not named:
        ours_first = [p for _, p in ours_first]
        ours_second = [p for _, p in ours_second]
    theirs = torch.optim.Adam(first, lr=0.01, betas=(0.8, 0.9))
    ours = functional_optim.Adam(ours_first, lr=0.01, betas=(0.8, 0.9))
    theirs.add_param_group({"params": second, "lr": 0.05, "amsgrad": True})
    ours.add_param_group({"params": ours_second, "lr": 0.05, "amsgrad": True})
    assert ours.state_dict()["param_groups"] == theirs.state_dict()["param_groups"]
    assert ("param_names" in ours.param_groups[1]) == named
    for step in range(3):
        grads = [torch.full_like(p, 0.1 * (step + 1)) for p in m.parameters()]
        for p, g in zip(m.parameters(), grads):
            p.grad = g
        theirs.step()
        ours.step(grads)
    for (name, p), q in zip(m.named_parameters(), ours_params.values()):
        torch.testing.assert_close(q, p.detach(), rtol=1e-6, atol=1e-7, msg=name)
    assert sorted(ours.state_dict()["state"]) == sorted(theirs.state_dict()["state"]) == [0, 1, 2, 3]


@pytest.mark.parametrize("optimizer", [functional_optim.SGD, torch.optim.SGD], ids=["ours", "torch"])
def test_add_param_group_errors_are_torchs(optimizer):
    w, b, c = (torch.zeros(2, requires_grad=True) for _ in range(3))
    named = optimizer([("w", w)], lr=0.1)
    unnamed = optimizer([w], lr=0.1)
    with pytest.raises(ValueError, match=r"^all optimizer param groups should be with/without names. cannot add param group without names to the optimizer$"):
        named.add_param_group({"params": [b]})
    with pytest.raises(ValueError, match=r"^all optimizer param groups should be with/without names. cannot add param group with names to the optimizer$"):
        unnamed.add_param_group({"params": [("b", b)]})
    with pytest.raises(ValueError, match=r"^all optimizer params should be with/without names. Some param names are missing$"):
        named.add_param_group({"params": [("b", b), c]})
    with pytest.raises(ValueError, match=r"^some parameters appear in more than one parameter group$"):
        unnamed.add_param_group({"params": [w]})
    with pytest.raises(TypeError, match=r"^param_group must be a dict, but got <class 'list'>$"):
        unnamed.add_param_group([b])
    with pytest.raises(KeyError):
        unnamed.add_param_group({"lr": 0.1})
    with pytest.raises(ValueError, match=r"^can't optimize a non-leaf Tensor$"):
        unnamed.add_param_group({"params": [b * 2]})
    with pytest.raises(ValueError, match=r"^Invalid learning rate: -1.0$") if optimizer is functional_optim.SGD else _no_error():
        unnamed.add_param_group({"params": [c], "lr": -1.0})  # (torch checks a group's values nowhere)
    assert len(named.param_groups) == 1
    assert len(unnamed.param_groups) == (1 if optimizer is functional_optim.SGD else 2)


class _no_error:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_add_param_group_rejected_changes_nothing():
    w, b = torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
    opt = functional_optim.Adam([w], lr=0.1)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 0: 1.5"):
        opt.add_param_group({"params": [b], "betas": (1.5, 0.9)})
    assert len(opt.param_groups) == 1 and opt.param_group_indices() == [[0]]
    opt.add_param_group({"params": [b]})  # b is free again
    opt.step([torch.ones(2), torch.ones(2)])
    assert opt.param_group_indices() == [[0], [1]] and sorted(opt.get_state()) == [0, 1]


def test_add_param_group_shares_the_constructors_tensor_lr_as_torch():
    lr = torch.tensor(0.01)
    w, b = torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
    for cls in (functional_optim.SGD, torch.optim.SGD):
        opt = cls([w], lr=lr)
        opt.add_param_group({"params": [b]})
        assert opt.param_groups[1]["lr"] is lr


# ----------------------------------------------------------------------------- names and state dicts

def test_names_kept_when_the_loaded_state_dict_has_none():
    """torch: saved param_names replace the optimizer's; a state dict without names leaves
    them. Ours does the same, both ways."""
    m = model()
    unnamed = torch.optim.SGD(list(m.parameters()), lr=0.3)
    for cls in (functional_optim.SGD, torch.optim.SGD):
        named = cls(m.named_parameters(), lr=0.1)
        named.load_state_dict(unnamed.state_dict())
        assert named.param_groups[0]["param_names"] == ["0.weight", "0.bias", "1.weight", "1.bias"]
        assert named.param_groups[0]["lr"] == 0.3
        assert named.state_dict()["param_groups"][0]["param_names"] == ["0.weight", "0.bias", "1.weight", "1.bias"]


def test_scripted_optimizer_built_from_named_parameters():
    """An optimizer built from named_parameters() scripts (the names stay with the eager
    param_groups; the scripted copy has the protocol's torch-format state dict without them),
    and a torch.optim state dict with names loads into the scripted module."""
    from functional_optim.scripting import script_optimizer

    m = model()
    named = torch.optim.Adam(m.named_parameters(), lr=0.01)
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    named.step()
    module = script_optimizer(functional_optim.Adam([p.detach().clone() for p in m.parameters()], lr=0.5))
    functional_optim.load_state_dict(module, named.state_dict())
    saved = functional_optim.state_dict(module)
    assert saved["param_groups"][0]["lr"] == 0.01 and "param_names" not in saved["param_groups"][0]
    for i, entry in named.state_dict()["state"].items():
        assert torch.equal(saved["state"][i]["exp_avg"], entry["exp_avg"])
    eager = functional_optim.Adam(m.named_parameters(), lr=0.01)
    assert script_optimizer(eager).param_group_indices() == [[0, 1, 2, 3]]
