"""Every code example of the documentation runs, and prints what the page says it prints.

The rule for ``docs/*.md`` (and ``README.md`` when it has examples): every fenced ```` ```python ````
block is a complete script, and the next fenced block, after blank lines only, is a
```` ```text ```` block holding exactly what the script prints on standard output (the *expect
block*; ``(no output)`` when it prints nothing). Each script runs in a fresh process, from a
temporary file, with the repository root as working directory and on ``PYTHONPATH``; scripts
that need several workers start them on loopback themselves. A script that exits with an error
fails its test. The one way an example is skipped: in the TorchScript-removed mode
(``--torchscript-removed``), an example that calls ``torch.jit`` itself (it shows the optional
TorchScript surfaces, which cannot run there) or imports ``torch.distributed.optim`` (which torch
2.13 scripts at import).

When an example's output changes on purpose, rewrite the expect blocks in the pages with

    EXPECTTEST_ACCEPT=1 python -m pytest tests/docs/test_docs_examples.py

and review the change with ``git diff`` (expecttest's convention, applied to the pages).
"""
import dataclasses
import glob
import os
import re
import subprocess
import sys
import tempfile
from typing import List

import expecttest
import pytest

from tests.support.expect import ACCEPT_HINT, accepting
from tests.support import REPO

NO_OUTPUT = "(no output)"
TIMEOUT_S = 120
_OPEN = re.compile(r"^(`{3,}|~{3,})(.*)$")


@dataclasses.dataclass
class Block:
    lang: str
    first: int  # line index of the opening fence
    last: int  # line index of the closing fence
    body: str


def fenced_blocks(text: str) -> List[Block]:
    """Fenced code blocks at the left margin, in order."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        match = _OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        fence = match.group(1)
        words = match.group(2).split()
        j = i + 1
        while j < len(lines) and not (
            lines[j].startswith(fence) and set(lines[j].strip()) == {fence[0]}
        ):
            j += 1
        if j == len(lines):
            raise ValueError(f"unclosed code fence at line {i + 1}")
        blocks.append(Block(words[0] if words else "", i, j, "\n".join(lines[i + 1: j])))
        i = j + 1
    return blocks


@dataclasses.dataclass
class Example:
    page: str  # path relative to the repository
    index: int  # 1-based, among the page's python blocks
    code: str
    line: int  # 1-based line of the python fence
    expect: str  # None when the expect block is missing

    @property
    def id(self) -> str:
        return f"{os.path.splitext(os.path.basename(self.page))[0]}-{self.index}"


def pages() -> List[str]:
    found = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    readme = os.path.join(REPO, "README.md")
    if os.path.exists(readme):
        found.append(readme)
    return [os.path.relpath(p, REPO) for p in found]


def examples_of(page: str) -> List[Example]:
    text = open(os.path.join(REPO, page)).read()
    lines = text.split("\n")
    blocks = fenced_blocks(text)
    found = []
    for k, block in enumerate(blocks):
        if block.lang != "python":
            continue
        expect = None
        if k + 1 < len(blocks) and blocks[k + 1].lang == "text":
            between = lines[block.last + 1: blocks[k + 1].first]
            if all(not line.strip() for line in between):
                expect = blocks[k + 1].body
        found.append(Example(page, len(found) + 1, block.body + "\n", block.first + 1, expect))
    return found


def all_examples() -> List[Example]:
    return [e for page in pages() for e in examples_of(page)]


EXAMPLES = all_examples()


def normalize(output: str) -> str:
    text = "\n".join(line.rstrip() for line in output.strip("\n").split("\n"))
    return text if text else NO_OUTPUT


def run_example(example: Example) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("EXPECTTEST_ACCEPT", None)
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, f"{example.id.replace('-', '_')}.py")
        with open(script, "w") as f:
            f.write(example.code)
        done = subprocess.run(
            [sys.executable, script], cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    if done.returncode != 0:
        pytest.fail(
            f"{example.page}:{example.line} (example {example.index}) exited with {done.returncode}\n"
            f"--- stdout ---\n{done.stdout}\n--- stderr (end) ---\n{done.stderr[-4000:]}"
        )
    return normalize(done.stdout)


def accept(example: Example, actual: str) -> None:
    """Rewrite the expect block of ``example`` in its page (or add one after the code)."""
    path = os.path.join(REPO, example.page)
    text = open(path).read()
    lines = text.split("\n")
    blocks = fenced_blocks(text)
    python_blocks = [k for k, b in enumerate(blocks) if b.lang == "python"]
    k = python_blocks[example.index - 1]
    new_body = actual.split("\n")
    if example.expect is not None:
        target = blocks[k + 1]
        lines[target.first + 1: target.last] = new_body
    else:
        at = blocks[k].last + 1
        lines[at:at] = ["", "```text"] + new_body + ["```"]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print(f"Accepting new output for {example.page} example {example.index}")


def _marks(example: Example):
    # torch.jit itself, or torch.distributed.optim, which torch 2.13 scripts when it is imported
    needs = "torch.jit." in example.code or "torch.distributed.optim" in example.code
    return [pytest.mark.torchscript] if needs else []


@pytest.mark.parametrize("example", [pytest.param(e, marks=_marks(e), id=e.id) for e in EXAMPLES])
def test_example_prints_its_expect_block(example):
    actual = run_example(example)
    if accepting():
        if example.expect is None or normalize(example.expect) != actual:
            accept(example, actual)
        return
    assert example.expect is not None, (
        f"{example.page}:{example.line}: example {example.index} has no ```text block right after it "
        f"(write its output there, or '{NO_OUTPUT}'; EXPECTTEST_ACCEPT=1 adds it)"
    )
    expecttest.assert_eq(
        normalize(example.expect) + "\n",
        actual + "\n",
        msg=f"{example.page}:{example.line} (example {example.index})\n"
        + ACCEPT_HINT.format(where="tests/docs/test_docs_examples.py"),
    )


def test_every_page_with_code_is_covered():
    """The pages that must carry checked examples do, so a broken parser cannot hide them."""
    counts = {}
    for e in EXAMPLES:
        counts[e.page] = counts.get(e.page, 0) + 1
    for page in ("quickstart", "engine", "functional_optimizers", "distributed_optimizer", "device_maps", "migration"):
        assert counts.get(f"docs/{page}.md", 0) >= 1, f"docs/{page}.md has no python example"


def test_fence_parser():
    text = "a\n```python\nprint(1)\n```\n\n```text\n1\n```\n````md\n```python\nx\n```\n````\n"
    blocks = fenced_blocks(text)
    assert [(b.lang, b.body) for b in blocks] == [("python", "print(1)"), ("text", "1"), ("md", "```python\nx\n```")]
