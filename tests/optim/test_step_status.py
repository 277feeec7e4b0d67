"""The step statuses: one table, the op library's (plugin/csrc/optim/step_status.h), which every
protocol and every kind of local optimizer answers with (plugin/optim/_status.py reads it)."""
import os
import re

import pytest
import torch

import functional_optim as F
from plugin import ops
from plugin.optim import PythonLocalOptimizer, _owners, _status


HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "plugin", "csrc", "optim", "step_status.h")


def header_table():
    """The table as the C++ header writes it (the oracle: the source, not the op's answer):
    the enum's values, ``kApplied = 0``, and the names ``{"applied", kApplied}``."""
    text = open(HEADER).read()
    values = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(k[A-Z]\w*) = (\d+),", text, re.M)}
    names = dict(re.findall(r'\{"(\w+)", (k[A-Z]\w*)\}', text))
    assert values and set(names.values()) == set(values), (values, names)
    return {name: values[enum] for name, enum in names.items()}


def test_the_op_and_the_python_constants_give_the_headers_table():
    """The op exports the header's enum (every name, its value), and the Python constants and
    the protocols' texts read that export. The statuses each situation gets (late, changed,
    refused, not reached, applied) are checked where the owners answer them:
    test_native_local_optimizer.py, test_backward_and_step.py, below."""
    want = header_table()
    table = ops._step_statuses()
    assert table == want
    assert sorted(table) == ["applied", "changed", "late", "not_reached", "refused"]
    for name, value in want.items():
        assert getattr(_status, name.upper()) == value
        assert getattr(_owners, name.upper()) == value  # what the protocols read
    assert set(_owners.STATUS_TEXT) == {want["changed"], want["late"], want["refused"]}


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

