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
