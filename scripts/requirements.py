"""The project's Python requirements by group, read from where they are declared (one place each):

* ``build``: pyproject.toml's ``[build-system] requires``, torch left out (the plugin is built
  against the torch already installed: scripts/setup_env.sh installs one first);
* ``job``, ``test``, ``docs``: setup.py's ``extras_require`` (read from its text: no torch needed).

    python scripts/requirements.py [--missing] GROUP[,GROUP...]

prints one requirement per line; with ``--missing`` only those this Python does not satisfy (not
installed, or installed at a version outside the requirement's), so that set-up installs what is
missing and pip resolves nothing that is already there (scripts/setup_env.sh, scripts/with_torch.sh).
Exits 2 naming a group it does not know.
"""
import ast
import importlib.metadata
import os
import sys
import tomllib

try:
    from packaging.requirements import Requirement
except ImportError:  # a bare virtual environment: pip's own copy
    from pip._vendor.packaging.requirements import Requirement

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def extras():
    """setup.py's ``extras_require``, a literal in its ``setup(...)`` call."""
    with open(os.path.join(HERE, "setup.py")) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup":
            for keyword in node.keywords:
                if keyword.arg == "extras_require":
                    return ast.literal_eval(keyword.value)
    raise SystemExit("requirements.py: setup.py's setup() call has no extras_require literal")


def groups():
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        build = tomllib.load(f)["build-system"]["requires"]
    return {"build": [r for r in build if Requirement(r).name != "torch"], **extras()}


def satisfied(requirement):
    req = Requirement(requirement)
    try:
        version = importlib.metadata.version(req.name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return req.specifier.contains(version, prereleases=True)


def main(argv):
    missing = "--missing" in argv
    names = [a for a in argv if a != "--missing"]
    if len(names) != 1:
        print("usage: python scripts/requirements.py [--missing] GROUP[,GROUP...]", file=sys.stderr)
        return 2
    known = groups()
    wanted = names[0].split(",")
    unknown = [g for g in wanted if g not in known]
    if unknown:
        print(f"requirements.py: unknown group(s) {unknown}; expected some of {sorted(known)}", file=sys.stderr)
        return 2
    for group in wanted:
        for requirement in known[group]:
            if not (missing and satisfied(requirement)):
                print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
