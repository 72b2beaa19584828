"""Generates the gRPC stubs into the build while setuptools builds the package.

The metadata lives in pyproject.toml; this file only hooks two commands:

- build_py: the stubs (maxsimd/v1/*_pb2*.py) are generated into the build
  from the .proto files, never kept in the source tree;
- sdist: the .proto files are copied into the sdist (as proto/maxsimd/v1/),
  next to build_stubs.py, so that a wheel builds from the sdist alone.

The protos are looked up, first found wins, in $MAXSIMD_PROTO_DIR, in
proto/ next to this file (an unpacked sdist), and in ../../proto (a
checkout of the repository).
"""

import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_stubs  # noqa: E402


class BuildPyWithStubs(build_py):
    """build_py, then maxsimd/v1/*_pb2*.py generated into build_lib."""

    def run(self) -> None:
        super().run()
        build_stubs.generate(self.build_lib, build_stubs.find_proto_dir())


class SdistWithProtos(sdist):
    """sdist, with the .proto files the stubs are generated from."""

    def make_release_tree(self, base_dir: str, files: list) -> None:
        super().make_release_tree(base_dir, files)
        source = build_stubs.find_proto_dir()
        for path in build_stubs.proto_sources(source):
            relative = os.path.relpath(path, source)
            target = os.path.join(base_dir, build_stubs.SDIST_PROTO_DIR,
                                  relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.exists(target):  # an sdist of an sdist links it
                os.remove(target)
            shutil.copyfile(path, target)


setup(cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProtos})
