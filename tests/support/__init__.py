"""The tests' shared harness: RPC clusters, graphs, optimizer configurations, expect files.

Test modules import it as ``tests.support``; the worker processes they spawn inherit the
test process's ``sys.path`` and import the same modules by the same names.
"""
import os

# The repository root (the folder holding plugin/, functional_optim/, scripts/, docs/).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
