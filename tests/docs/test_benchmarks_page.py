"""docs/benchmarks.md quotes the committed result files exactly (scripts/render_benchmarks.py)."""
import importlib.util
import json
import os
import shutil

import pytest
from tests.support import REPO



def load_renderer():
    spec = importlib.util.spec_from_file_location("render_benchmarks", os.path.join(REPO, "scripts", "render_benchmarks.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


R = load_renderer()


def page():
    with open(R.PAGE) as f:
        return f.read()


def test_page_matches_the_committed_result_files():
    assert R.render_page(page()) == page(), (
        "docs/benchmarks.md does not quote results/*.json as they are: run `python scripts/render_benchmarks.py` "
        "and commit the page"
    )


def test_every_existing_result_file_is_quoted():
    text = page()
    for name in R.SECTIONS:
        file, _, key = name.partition(".")
        path = os.path.join(R.RESULTS, file + ".json")
        if key:  # an entry of a file
            present = os.path.exists(path) and key in json.load(open(path))
            assert (f"*Source: `results/{file}.json`, key `{key}`" if present
                    else f"`results/{file}.json` has no `{key}` entry yet") in text, name
        elif os.path.exists(path):
            assert f"*Source: `results/{name}.json`" in text, name
        else:
            assert f"`results/{name}.json` is not in the repository yet" in text, name


@pytest.fixture
def results_copy(tmp_path):
    for name in R.SECTIONS:
        path = os.path.join(R.RESULTS, name.partition(".")[0] + ".json")
        if os.path.exists(path):
            shutil.copy(path, tmp_path / os.path.basename(path))
    return tmp_path


def test_an_entry_of_a_file_renders_from_that_entry(results_copy):
    """bench_mainjob.json's "auth" entry (a second run of the script) has its own section; without
    the entry the section says how to measure it."""
    path = results_copy / "bench_mainjob.json"
    data = json.loads(path.read_text())
    data.pop("auth", None)
    path.write_text(json.dumps(data))
    assert "`results/bench_mainjob.json` has no `auth` entry yet: run `python scripts/bench_mainjob.py --auth`" in (
        R.render_page(page(), str(results_copy)))
    run = {"pair": 0, "samples_per_s": 900.0, "training_seconds": 10.0}
    data["auth"] = {
        "meta": {"torch": "2.13.0", "python": "3.11", "cpus": 2, "pairs": 1, "train_options": [], "workload": "digits",
                 "job": {"trainers": 4, "servers": 2, "optimizer": "adam", "epochs": 20}, "parameters": 10, "note": ""},
        "runs": [dict(run, stack="plugin+key"), dict(run, stack="plugin", samples_per_s=1000.0)],
        "ratios": [0.9], "median_ratio": 0.9, "target": 0.95,
    }
    path.write_text(json.dumps(data))
    text = R.render_page(page(), str(results_copy))
    assert "*Source: `results/bench_mainjob.json`, key `auth`" in text
    assert "| keyed / unkeyed samples/s (median of pairs) | >= 0.95x | 0.900x | **missed** |" in text


def test_a_missing_file_renders_a_note(results_copy):
    os.remove(results_copy / "bench_backward.json")
    text = R.render_page(page(), str(results_copy))
    assert "`results/bench_backward.json` is not in the repository yet" in text


def test_a_file_without_its_own_table_is_listed_value_by_value():
    text = R.render_generic({"T8_spinner": {"ours_steps_per_s": 123.456, "torch": 7}})
    assert "| `T8_spinner.ours_steps_per_s` | 123.5 |" in text
    assert "| `T8_spinner.torch` | `7` |" in text


def test_missing_file_is_reported_and_then_quoted_as_soon_as_it_exists(results_copy):
    (results_copy / "bench_gil.json").unlink()
    assert "`results/bench_gil.json` is not in the repository yet" in R.render_page(page(), str(results_copy))
    gil = {
        "local_step": {"plugin": {"torchscript": {"alone_ms": 2.0, "spinner_ms": 2.1, "slowdown": 1.05},
                                  "python": {"alone_ms": 2.0, "spinner_ms": 7.0, "slowdown": 3.5}}},
        "server": {"8": {e + s: 100.0 for e in ("plugin-adam", "torch-adam", "plugin-nadam", "torch-nadam")
                         for s in ("", "+spinner")}},
        "server_ratios": {"8": {"adam: plugin/torch": 1.0, "adam: plugin/torch+spinner": 0.9,
                                "nadam: plugin/torch": 1.0, "nadam: plugin/torch+spinner": 2.5}},
        "owner_gil": {"torch 2.14.1, TorchScript removed": {"plugin-adam": 300.0, "plugin-adam+gil": 270.0,
                                                            "plugin-adam: gil/idle": 0.9}},
        "meta": {"torch": "2.13.0", "cpus": 2, "seconds": 1.0, "num_params": 1, "param_size": 4096},
    }
    (results_copy / "bench_gil.json").write_text(json.dumps(gil))
    text = R.render_page(page(), str(results_copy))
    assert "*Source: `results/bench_gil.json`" in text
    assert "| Adam, T = 8, spinner: plugin / torch (TorchScript path) | >= 1.0x | 0.90x | **missed** |" in text
    assert "| NAdam, T = 8, spinner: plugin / torch Python path | >= 2x | 2.50x | met |" in text
    assert "called from TorchScript | <= 1.2x | 1.05x | met |" in text
    assert ("| owner's GIL held: plugin held / idle (torch 2.14.1, TorchScript removed) | >= 0.95 | 0.90 | **missed** |"
            in text)
    assert "| torch 2.14.1, TorchScript removed | 300 | 270 | 0.90 | - | - | - | not run |" in text


def test_verdicts_follow_the_numbers(results_copy):
    """A ratio above its target is reported as missed, below as met."""
    path = results_copy / "bench_optim.json"
    data = json.loads(path.read_text())
    name = next(iter(data["targets"]))
    data["targets"][name]["B_ours-script-fused/torch-fused"] = 1.5
    data["targets"][name]["A_ours-eager-fused/torch-fused"] = 0.5
    path.write_text(json.dumps(data))
    text = R.render_page(page(), str(results_copy))
    row = next(line for line in text.splitlines() if line.startswith(f"| {name} | 0.500x"))
    assert "0.500x, met" in row and "1.500x, **missed**" in row


def test_two_phase_cost_is_rendered():
    """bench_gil's part 3: the checked step against the two phases; a file without part 3
    renders without the table."""
    row = {"checked": 100.0, "two_phase": 80.0, "cost": 0.2, "ratios": [0.8]}
    meta = {"num_params": 100, "param_size": 4096, "two_phase_servers": 2, "repeats": 1, "two_phase_seconds": 1.0}
    text = R.render_two_phase({"1": {"adam": row}, "8": {"nadam": dict(row, two_phase=95.0, cost=0.05)}}, meta)
    assert "| 1 | adam | 100 | 80 | 20.0 % |" in text
    assert "| 8 | nadam | 100 | 95 | 5.0 % |" in text
    data = json.loads(open(os.path.join(R.RESULTS, "bench_gil.json")).read())
    data.pop("two_phase", None)
    assert "Target (issues 10 and 19)" not in R.render_bench_gil(data)
