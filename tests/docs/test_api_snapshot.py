"""The public surface, as text: every public name with its signature, every op schema.

``tests/docs/expect/api_snapshot.txt`` holds the accepted listing. Any change to a public name, a
signature, a default, an ``__all__`` or an op schema shows up as a diff of that file; when the
change is intended, accept it with ``EXPECTTEST_ACCEPT=1 python -m pytest tests/docs/test_api_snapshot.py``
and commit the new file with the change. The API reference (``docs/api.md``) must name every
entry too (test below).
"""
import inspect
import os
import re

from tests.support import public_api as api
from tests.support.expect import assert_expected_file
from tests.support import REPO

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECT = os.path.join(HERE, "expect", "api_snapshot.txt")
API_PAGE = os.path.join(REPO, "docs", "api.md")

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _signature(obj) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(<no signature>)"
    return _ADDRESS.sub("", text)


def render_python_api() -> str:
    lines = []
    for item in api.public_names():
        depth = "    " if item.owner is not None else ""
        if item.kind == "module":
            lines.append("")
            lines.append(f"module {item.qualname}  __all__ = {sorted(item.obj.__all__)}")
        elif item.kind == "submodule":
            lines.append(f"{item.qualname}: submodule")
        elif item.kind in ("class", "function") and not api.canonical(item):
            lines.append(f"{item.qualname} = {item.obj.__module__}.{item.obj.__qualname__}")
        elif item.kind == "class":
            lines.append(f"class {item.qualname}{_signature(item.obj)}")
        elif item.kind == "function":
            lines.append(f"def {item.qualname}{_signature(item.obj)}")
        elif item.kind == "property":
            lines.append(f"{depth}property {item.qualname.rsplit('.', 1)[1]}{_signature(item.function)}")
        elif item.kind in ("method", "classmethod", "staticmethod"):
            prefix = "" if item.kind == "method" else f"@{item.kind} "
            lines.append(f"{depth}{prefix}def {item.qualname.rsplit('.', 1)[1]}{_signature(item.function)}")
        else:
            lines.append(f"{depth}{item.qualname}: {type(item.obj).__name__} = {item.obj!r}")
    return "\n".join(lines).lstrip("\n") + "\n"


def render_snapshot() -> str:
    return (
        "# Public Python API: tests/support/public_api.py lists it; signatures from inspect.signature\n\n"
        + render_python_api()
        + "\n# torch.ops.gilfree_rpc op schemas\n\n"
        + "\n".join(api.op_schemas())
        + "\n\n# torch.classes.gilfree_rpc custom class methods\n\n"
        + "\n".join(api.custom_class_schemas())
        + "\n"
    )


def test_api_snapshot():
    assert_expected_file(render_snapshot(), EXPECT, "tests/docs/test_api_snapshot.py")


def test_snapshot_is_deterministic():
    assert render_snapshot() == render_snapshot()


def test_snapshot_sees_every_kind_of_entry():
    """The listing is not empty or truncated: it has the names and schemas we know exist."""
    text = render_snapshot()
    for expected in (
        "def plugin.autograd.backward(context_id: int, roots: List[torch.Tensor], retain_graph: bool = False, "
        "mode: str = 'smart') -> None",
        "class plugin.optim.DistributedOptimizer(",
        "    property owners(",
        "    @classmethod def create(",
        "functional_optim.Adam = functional_optim.adam.Adam",
        'gilfree_rpc::backward(int context_id, Tensor[] roots, bool retain_graph=False, str mode="smart", '
        'int[] hook_args=[]) -> ()',
        "__enter__(__torch__.torch.classes.gilfree_rpc.StepLock _0) -> NoneType _0",
    ):
        assert expected in text, expected


def autodoc_modules(page: str):
    """Modules that docs/api.md documents with their members (``.. automodule::`` without
    ``:no-members:``); autodoc documents the names of their ``__all__``."""
    modules = set()
    for match in re.finditer(r"^\.\. automodule:: (\S+)\n((?:   .*\n)*)", page, re.M):
        if ":no-members:" not in match.group(2):
            modules.add(match.group(1))
    return modules


def test_api_page_names_every_public_name_and_schema():
    """docs/api.md covers every public name: documented by an ``automodule`` with members (for
    names in that module's ``__all__``; class members come with their class), or named in the
    text (the package's re-exports); and it quotes every op schema exactly."""
    page = open(API_PAGE).read()
    documented = autodoc_modules(page)
    missing = []
    for item in api.public_names():
        if item.owner is not None:
            continue  # members come with their class (``:members:`` is on by default, conf.py)
        module = item.qualname if item.kind == "module" else item.qualname.rsplit(".", 1)[0]
        if item.kind != "submodule" and module in documented:
            continue
        if not re.search(rf"{re.escape(item.qualname)}(?![\w])", page):
            missing.append(item.qualname)
    for schema in api.op_schemas() + api.custom_class_schemas():
        if schema not in page:
            missing.append(schema)
    assert not missing, f"docs/api.md does not mention: {missing}"


def test_api_page_coverage_check_can_fail():
    page = open(API_PAGE).read()
    assert "functional_optim.adam" in autodoc_modules(page)
    assert "plugin" not in autodoc_modules(page)  # :no-members:
