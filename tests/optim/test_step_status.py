"""The step statuses: one table, the op library's (plugin/csrc/optim/step_status.h), which every
protocol and every kind of local optimizer answers with (plugin/optim/_status.py reads it)."""
import pytest
import torch

import functional_optim as F
from plugin import ops
from plugin.optim import PythonLocalOptimizer, _owners, _status


def test_the_python_constants_are_the_libraries_table():
    table = ops._step_statuses()
    assert sorted(table) == ["applied", "changed", "late", "not_reached", "refused"]
    assert len(set(table.values())) == len(table)  # distinct
    for name, value in table.items():
        assert getattr(_status, name.upper()) == value
        assert getattr(_owners, name.upper()) == value  # what the protocols read
    assert set(_owners.STATUS_TEXT) == {table["changed"], table["late"], table["refused"]}


def test_every_kind_answers_a_late_step_with_the_tables_late():
    """A deadline in the past: the Python local optimizer (and the TorchScript one, below; the
    native one over RPC: test_native_local_optimizer.py) answers the table's ``late``, applying
    nothing."""
    late, applied = ops._step_statuses()["late"], ops._step_statuses()["applied"]
    python_param = torch.nn.Parameter(torch.ones(3))
    python = PythonLocalOptimizer(torch.optim.SGD, [python_param], lr=0.5)
    assert python.commit_step(ops._park_step([torch.ones(3)], 60_000), 1) == late
    assert torch.equal(python_param.detach(), torch.ones(3))
    assert python.commit_step(ops._park_step([torch.ones(3)], 60_000), -1) == applied
    assert torch.equal(python_param.detach(), torch.full((3,), 0.5))


@pytest.mark.torchscript
def test_the_torchscript_local_optimizer_answers_the_tables_statuses():
    from plugin.optim import ScriptLocalOptimizer

    param = torch.ones(3)
    local = ScriptLocalOptimizer.create(F.SGD, [param], lr=0.5)
    late, applied = ops._step_statuses()["late"], ops._step_statuses()["applied"]
    assert local.commit_step(ops._park_step([torch.ones(3)], 60_000), 1) == late
    assert torch.equal(param, torch.ones(3))
    assert local.commit_step(ops._park_step([torch.ones(3)], 60_000), -1) == applied
    assert torch.equal(param, torch.full((3,), 0.5))

