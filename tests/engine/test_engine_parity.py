"""The plugin's engine against torch.distributed.autograd on the same graphs.

Same seeds, same graph, equal gradients on every worker, in both modes; each case also
runs with backward called from a scripted function.
"""
import pytest
import torch

from tests.support import graphs


def assert_same_gradients(ours, theirs):
    assert ours.keys() == theirs.keys()
    for worker in theirs:
        assert ours[worker].keys() == theirs[worker].keys(), worker
        for name, expected in theirs[worker].items():
            got = ours[worker][name]
            if expected.is_sparse:
                assert got.is_sparse, (worker, name)
                got, expected = got.to_dense(), expected.to_dense()
            torch.testing.assert_close(got, expected, rtol=1e-12, atol=0, msg=f"{worker}/{name}")


@pytest.mark.parametrize("mode", ["fast", "smart"])
@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.torchscript) if c == "torchscript_function" else c for c in sorted(graphs.CASES)]
)
def test_matches_torch(cluster, case, mode):
    theirs = graphs.run_case(case, "torch")
    ours = graphs.run_case(case, "plugin", mode=mode)
    assert any(theirs.values()), "the case produced no gradients at all"
    assert_same_gradients(ours, theirs)


@pytest.mark.torchscript
@pytest.mark.parametrize("mode", ["fast", "smart"])
@pytest.mark.parametrize("case", ["builtin_rpc_sync", "nested_three_workers", "remote_to_here"])
def test_backward_from_scripted_function(cluster, case, mode):
    theirs = graphs.run_case(case, "torch", scripted=True)
    ours = graphs.run_case(case, "plugin", mode=mode, scripted=True)
    assert_same_gradients(ours, theirs)
