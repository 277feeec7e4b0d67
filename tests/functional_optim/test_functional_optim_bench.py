"""The benchmark script runs (tiny sizes; no timing assertions)."""
import json
import os
import subprocess
import sys
from tests.support import REPO

ROOT = REPO


def test_bench_optim_quick(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "bench_optim.py"), "--quick", "--only", "SGD,Adam,Adagrad,NAdam", "--out", str(out)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["quick"] is True and report["bandwidth_inplace_add_GBps"] > 0
    variants = {(r["optimizer"], r["workload"], r["variant"]) for r in report["results"]}
    for workload in ("A", "B"):
        assert ("Adam", workload, "torch-fused") in variants
        assert ("Adam", workload, "torch-functional") in variants
        assert ("Adam", workload, "ours-script-fused") in variants
        assert ("NAdam", workload, "ours-eager-foreach") in variants
    assert set(report["targets"]) == {"SGD", "Adam", "Adagrad"}
    assert "targets" in proc.stdout


def test_bench_optim_sparse_quick(tmp_path):
    """--sparse (issue 22) runs and merges its entry into an existing report, keeping the rest;
    the rendered page section has the sparse table."""
    out = tmp_path / "bench.json"
    out.write_text(json.dumps({"kept": 1}))
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "bench_optim.py"), "--sparse", "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["kept"] == 1
    sparse = report["sparse"]
    assert sparse["quick"] is True and set(sparse["threads"]) == {"1", "2"}
    for name in ("SparseAdam", "Adagrad", "SGD"):
        row = sparse["threads"]["1"][name]
        assert set(row["variants"]) == {"torch", "ours-kernel", "ours-eager", "rows-copy"}
        assert row["floor_ms"] > 0 and row["ours/floor"] > 0 and row["ours/torch"] > 0
    assert "target ours/floor <= 2.0" in proc.stdout
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import render_benchmarks
    finally:
        sys.path.pop(0)
    page = render_benchmarks.render_bench_optim(report)
    assert "| SparseAdam | 1 |" in page and "ours / floor (<= 2x)" in page
