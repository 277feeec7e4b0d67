"""Expect files with expecttest's semantics: compare, or rewrite under ``EXPECTTEST_ACCEPT=1``.

``expecttest.TestCase.assertExpectedInline`` rewrites a string literal in the test file; the
API snapshot is too long for that, and the documentation's expected outputs live in the
Markdown pages. Both use this helper (or the same rule): with ``EXPECTTEST_ACCEPT`` set in the
environment the expected text is replaced by the actual one and the test passes; otherwise a
mismatch fails with expecttest's unified diff and the hint to accept.
"""
import os

import expecttest

ACCEPT_HINT = (
    "If the new output is right, accept it with\n"
    "    EXPECTTEST_ACCEPT=1 python -m pytest {where}\n"
    "and review the change with `git diff` before committing."
)


def accepting() -> bool:
    """Whether ``EXPECTTEST_ACCEPT`` is set (read at call time, as expecttest does)."""
    return bool(os.getenv("EXPECTTEST_ACCEPT"))


def assert_expected_file(actual: str, path: str, test: str) -> None:
    """``actual`` must equal the content of ``path`` (a file kept under version control)."""
    if accepting():
        old = open(path).read() if os.path.exists(path) else None
        if old != actual:
            print(f"Accepting new output for {os.path.relpath(path)}")
            with open(path, "w") as f:
                f.write(actual)
        return
    expect = open(path).read() if os.path.exists(path) else ""
    expecttest.assert_eq(expect, actual, msg=ACCEPT_HINT.format(where=test))
