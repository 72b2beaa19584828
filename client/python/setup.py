"""Generates the gRPC stubs into the build while setuptools builds the package.

The metadata lives in pyproject.toml; this file only hooks build_py, since
the stubs are build outputs (from proto/ of the same checkout) and never part
of the source tree.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_stubs  # noqa: E402


class BuildPyWithStubs(build_py):
    """build_py, then maxsimd/v1/*_pb2*.py generated into build_lib."""

    def run(self) -> None:
        super().run()
        build_stubs.generate(self.build_lib,
                             os.environ.get("MAXSIMD_PROTO_DIR") or None)


setup(cmdclass={"build_py": BuildPyWithStubs})
