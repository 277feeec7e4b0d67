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
