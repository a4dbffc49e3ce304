"""Builds nimble._C through CMake (the same build tree the C++ tests use); the package's
metadata is in pyproject.toml.

    pip install --no-build-isolation -e .      # against the torch already installed

Set NIMBLE_CUDA=0 for a CPU-only build; NIMBLE_BUILD_DIR to move the build tree.
"""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        try:
            import torch  # noqa: F401
        except ImportError as e:  # pip's isolated build environment has no torch
            raise RuntimeError("nimble compiles against the torch already installed: install "
                               "torch==2.11.0, then pip install --no-build-isolation -e .") from e
        build_dir = os.environ.get("NIMBLE_BUILD_DIR", os.path.join(ROOT, "build"))
        cuda = "OFF" if os.environ.get("NIMBLE_CUDA", "1") == "0" else "ON"
        configure = [
            "cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
            f"-DPython3_EXECUTABLE={sys.executable}", f"-DNIMBLE_CUDA={cuda}",
        ]
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_C"])
        built = os.path.join(ROOT, "nimble", os.path.basename(self.get_ext_filename(ext.name)))
        dest = self.get_ext_fullpath(ext.name)
        if os.path.abspath(built) != os.path.abspath(dest):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(built, dest)


setup(
    ext_modules=[CMakeExtension("nimble._C")],
    cmdclass={"build_ext": CMakeBuild},
)
