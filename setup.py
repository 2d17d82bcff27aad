"""Declares the compiled extension d5._C only; all package metadata lives in pyproject.toml.

Build in place for development with ``pip install --no-build-isolation --no-deps -e .``.
"""
from glob import glob

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

# -ffast-math is deliberately absent: it lets the compiler assume no NaN/Inf, which breaks NaN
# propagation in max pooling and the NaN checks of the training loop.
OPENMP_FLAGS = ["-fopenmp"]

extension = Pybind11Extension(
    "d5._C",
    sources=sorted(["csrc/bindings.cpp", *glob("csrc/kernels/*.cpp")]),
    include_dirs=["csrc/include", "csrc/kernels"],
    cxx_std=17,
    extra_compile_args=["-O3", *OPENMP_FLAGS],
    extra_link_args=OPENMP_FLAGS,
)

setup(ext_modules=[extension], cmdclass={"build_ext": build_ext})
