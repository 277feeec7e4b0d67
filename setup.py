"""Builds the op library (plugin/csrc/*.cpp) with torch.utils.cpp_extension.

Install with ``pip install --no-build-isolation -e .`` so that the library is compiled
against the torch that is already installed.
"""
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))


sources = sorted(glob.glob(os.path.join("plugin", "csrc", "*.cpp")))

setup(
    name="gilfree-rpc",
    version="0.1.0",
    description="GIL-free distributed autograd and optimizers for torch.distributed.rpc",
    python_requires=">=3.11",
    packages=["plugin", "functional_optim"],
    install_requires=["torch>=2.11"],
    extras_require={
        "test": ["pytest", "pytest-timeout", "expecttest", "psutil", "scikit-learn"],
        "docs": ["sphinx", "myst-parser"],
        "plot": ["matplotlib"],
    },
    ext_modules=[
        CppExtension(
            "plugin._C",
            sources,
            include_dirs=[os.path.join(HERE, "plugin", "csrc")],
            extra_compile_args={"cxx": ["-O2", "-Wall", "-Wno-unused-parameter"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
