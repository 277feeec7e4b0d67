"""Every public name has a docstring that says what a user needs (issue 5, item 4).

Public names are those of ``tests/support/public_api.py`` (modules, the names in ``__all__`` and the
public members of public classes); a re-export (``functional_optim.Adam``) is checked where it is
defined (``functional_optim.adam.Adam``). The rules, each a test below:

1. Every public module, class, function, method and property has a docstring of its own.
2. **Args**: a callable with parameters (besides ``self``/``cls``) has an ``Args:`` section that
   names each of them (``*args``/``**kwargs`` included). A class documents its constructor's
   parameters in the class docstring.
3. **Returns**: a function or method whose return annotation is not ``None`` has a ``Returns:``
   section that starts with the type (``Dict[str, int]: ...``); properties and classes are exempt
   (their docstring is the description of the value).
4. **Raises**: every public callable has a ``Raises:`` section, or says ``Raises nothing``.
5. **Tensors**: a callable that takes or returns tensors (``Tensor`` in an annotation) says what
   shapes, dtypes and devices it accepts or gives: its docstring (the class docstring for a
   constructor) mentions a shape word, a dtype word and a device word (see ``TENSOR_WORDS``).
6. **Units**: a parameter whose name says it is a duration (``timeout``) has its unit (seconds).
7. **Sources**: the optimizers (each class and functional form of ``functional_optim``'s optimizer
   modules) cite a paper (a year) and torch's reference code (``torch/optim/...`` or
   ``torch.optim...``) on an ``Algorithm:``/``Sources:`` line; the plugin's algorithms
   (``ALGORITHMS``) have an ``Algorithm:`` line.
"""
import inspect
import re
import typing

import pytest

from tests.support import public_api as api

OPTIMIZER_MODULES = {
    "functional_optim." + m
    for m in (
        "sgd", "adam", "adamw", "adagrad", "rmsprop", "adamax", "adadelta", "rprop", "nadam", "radam", "asgd",
        "adafactor", "muon",
    )
}
ALGORITHMS = {
    "plugin.autograd.backward",
    "plugin.optim.DistributedOptimizer",
    "plugin.optim.ScriptLocalOptimizer",
}
TENSOR_WORDS = {
    "shape": ("shape", "scalar", "0-dim", "element", "size"),
    "dtype": ("dtype", "float", "floating"),
    "device": ("device", "cpu", "cuda"),
}
SECTION = re.compile(r"^(Args|Arguments|Returns|Raises|Yields|Example|Examples|Note|Notes|Attributes):\s*$")

NAMES = [n for n in api.public_names() if api.canonical(n)]
CALLABLES = [n for n in NAMES if n.kind in ("class", "function", "method", "classmethod", "staticmethod")]


def ids(items):
    return [n.qualname for n in items]


def own_doc(item) -> str:
    """The docstring written for this object (not inherited), cleaned up."""
    obj = item.function if item.function is not None else item.obj
    if item.kind == "data":
        return "documented"  # constants are documented by a ``#:`` comment and the module docstring
    doc = obj.__doc__ if item.kind != "class" else vars(obj).get("__doc__")
    return inspect.cleandoc(doc) if doc else ""


def sections(doc: str) -> dict:
    """Google-style sections: {header: text of its indented body}."""
    found, current = {}, None
    for line in doc.splitlines():
        match = SECTION.match(line)
        if match:
            current = match.group(1)
            found[current] = ""
        elif current is not None:
            if line.strip() and not line.startswith((" ", "\t")):
                current = None
            else:
                found[current] += line + "\n"
    return found


def signature_of(item):
    target = item.obj if item.kind == "class" else item.function
    return inspect.signature(target)


def parameters(item):
    params = list(signature_of(item).parameters.values())
    if item.kind in ("method", "classmethod") and params and params[0].name in ("self", "cls"):
        params = params[1:]
    if item.kind == "class" and [p.kind for p in params] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
        return []  # no constructor of its own (nn.Module's *args, **kwargs)
    return params


def mentions_tensor(item) -> bool:
    sig = signature_of(item)
    annotations = [p.annotation for p in sig.parameters.values()] + [sig.return_annotation]
    return any("Tensor" in (a if isinstance(a, str) else repr(a)) for a in annotations if a is not inspect.Parameter.empty)


@pytest.mark.parametrize("item", NAMES, ids=ids(NAMES))
def test_has_docstring(item):
    assert own_doc(item).strip(), f"{item.qualname} ({item.kind}) has no docstring"


@pytest.mark.parametrize("item", CALLABLES, ids=ids(CALLABLES))
def test_parameters_are_documented_under_args(item):
    params = parameters(item)
    if not params:
        return
    args = sections(own_doc(item)).get("Args") or sections(own_doc(item)).get("Arguments")
    assert args, f"{item.qualname} takes {[p.name for p in params]} but has no Args: section"
    missing = [p.name for p in params if not re.search(rf"(?<![\w]){re.escape(p.name)}(?![\w])", args)]
    assert not missing, f"{item.qualname}: the Args: section does not name {missing}"


@pytest.mark.parametrize("item", [n for n in CALLABLES if n.kind != "class"], ids=ids([n for n in CALLABLES if n.kind != "class"]))
def test_return_values_are_documented(item):
    returned = signature_of(item).return_annotation
    if returned in (None, type(None), inspect.Signature.empty, "None"):
        return
    doc_sections = sections(own_doc(item))
    body = doc_sections.get("Returns") or doc_sections.get("Yields")
    assert body, f"{item.qualname} returns {returned} but has no Returns: section"
    first = body.strip().splitlines()[0]
    assert re.match(r"[\w.\[\], ]+: ", first), (
        f"{item.qualname}: start the Returns: section with the type, as in 'Dict[str, int]: ...' (got {first!r})"
    )


@pytest.mark.parametrize("item", CALLABLES, ids=ids(CALLABLES))
def test_errors_are_documented(item):
    doc = own_doc(item)
    assert "Raises" in sections(doc) or "Raises nothing" in doc, (
        f"{item.qualname}: say what it raises under Raises:, or write 'Raises nothing'"
    )


TENSOR_CALLABLES = [n for n in CALLABLES if mentions_tensor(n)]


@pytest.mark.parametrize("item", TENSOR_CALLABLES, ids=ids(TENSOR_CALLABLES))
def test_tensor_shapes_dtypes_devices_are_documented(item):
    doc = own_doc(item).lower()
    missing = [what for what, words in TENSOR_WORDS.items() if not any(w in doc for w in words)]
    assert not missing, f"{item.qualname} takes or returns tensors; its docstring says nothing of their {missing}"


def arg_entry(args: str, name: str) -> str:
    """The text of ``name``'s entry in an Args section: its line and the deeper-indented ones."""
    lines = args.splitlines()
    for i, line in enumerate(lines):
        head = line.split(":", 1)[0]
        if re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", head):
            indent = len(line) - len(line.lstrip())
            entry = [line]
            for following in lines[i + 1:]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                entry.append(following)
            return "\n".join(entry)
    return ""


@pytest.mark.parametrize("item", CALLABLES, ids=ids(CALLABLES))
def test_durations_have_units(item):
    for p in parameters(item):
        if "timeout" in p.name:
            entry = arg_entry(sections(own_doc(item)).get("Args", ""), p.name)
            assert "second" in entry, f"{item.qualname}: give the unit of {p.name} in its Args entry"


def needs_sources(item) -> bool:
    module = item.qualname.rsplit(".", 1)[0]
    return item.kind in ("class", "function") and module in OPTIMIZER_MODULES or item.qualname in ALGORITHMS


SOURCED = [n for n in NAMES if needs_sources(n)]


@pytest.mark.parametrize("item", SOURCED, ids=ids(SOURCED))
def test_algorithms_cite_their_source(item):
    doc = own_doc(item)
    label = re.search(r"^(Algorithm|Sources):(.*(?:\n(?!\n).*)*)", doc, re.M)
    assert label, f"{item.qualname}: add an 'Algorithm:' or 'Sources:' paragraph naming where the algorithm comes from"
    if item.qualname.rsplit(".", 1)[0] in OPTIMIZER_MODULES:
        text = label.group(0)
        assert re.search(r"torch[/.]optim[/.]", text), f"{item.qualname}: name torch's reference code (torch/optim/...)"
        assert re.search(r"\b(19|20)\d\d\b", text), f"{item.qualname}: cite the paper (authors and year)"


def test_the_rules_see_the_whole_surface():
    """Guards the checks above against an empty or shrunken enumeration."""
    kinds = typing.Counter(n.kind for n in NAMES)
    assert kinds["module"] >= 17 and kinds["class"] >= 15 and kinds["method"] >= 100, kinds
    assert {n.qualname for n in SOURCED} >= ALGORITHMS
    assert len(TENSOR_CALLABLES) >= 50
