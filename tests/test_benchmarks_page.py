"""docs/benchmarks.md quotes the committed result files exactly (scripts/render_benchmarks.py)."""
import importlib.util
import json
import os
import shutil

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
        path = os.path.join(R.RESULTS, name + ".json")
        if os.path.exists(path):
            assert f"*Source: `results/{name}.json`" in text, name
        else:
            assert f"`results/{name}.json` is not in the repository yet" in text, name


@pytest.fixture
def results_copy(tmp_path):
    for name in R.SECTIONS:
        path = os.path.join(R.RESULTS, name + ".json")
        if os.path.exists(path):
            shutil.copy(path, tmp_path / (name + ".json"))
    return tmp_path


def test_a_missing_file_renders_a_note(results_copy):
    os.remove(results_copy / "bench_backward.json")
    text = R.render_page(page(), str(results_copy))
    assert "`results/bench_backward.json` is not in the repository yet" in text


def test_a_new_file_is_quoted_as_soon_as_it_exists(results_copy):
    (results_copy / "bench_gil.json").write_text(json.dumps({"T8_spinner": {"ours_steps_per_s": 123.456, "torch": 7}}))
    text = R.render_page(page(), str(results_copy))
    assert "| `T8_spinner.ours_steps_per_s` | 123.5 |" in text
    assert "*Source: `results/bench_gil.json`" in text


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
