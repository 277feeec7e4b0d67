"""Sphinx configuration: Markdown pages (MyST) and autodoc from the docstrings.

Build (warnings are errors):

    python3 -m sphinx -W --keep-going -b html docs docs/_build/html

autodoc imports ``plugin`` and ``functional_optim`` from this checkout, so build the op
library first (``python3 setup.py build_ext --inplace`` or ``pip install -e .``).
"""
import os
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# torch's own deprecation warnings (torch.jit.script) are not the docs' business
warnings.filterwarnings("ignore", category=DeprecationWarning)

project = "gilfree-rpc"
author = "the gilfree-rpc developers"
copyright = "the gilfree-rpc developers"
release = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]

autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_class_signature = "mixed"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_static_path = ["_static"]
html_title = "gilfree-rpc"
