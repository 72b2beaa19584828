#!/usr/bin/env python3
"""Generates the Python gRPC stubs of maxsimd's API from proto/.

The stubs are build outputs, never committed: they are generated here with
``grpc_tools.protoc`` (Debian: ``python3-grpc-tools``) so that they always
match the .proto files of the same checkout and the protobuf runtime of the
machine that runs them.

Usage::

    python3 client/python/build_stubs.py [OUT_DIR] [--proto-dir DIR]

writes ``OUT_DIR/maxsimd/v1/{types,reranker,admin}_pb2{,_grpc}.py``. OUT_DIR
defaults to ``client/python`` itself, which puts the stubs inside the package
(``client/python/maxsimd/v1/``, git-ignored). With any other OUT_DIR, point
the package at it with ``MAXSIMD_STUBS_DIR=OUT_DIR``.

This file imports nothing from the ``maxsimd`` package, so that it runs before
the stubs exist (the package cannot be imported without them).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

HERE = Path(__file__).resolve().parent
DEFAULT_PROTO_DIR = HERE.parent.parent / "proto"
PROTO_FILES = ("types.proto", "reranker.proto", "admin.proto")
# The subpackage the generated code imports itself as (from the proto
# package maxsimd.v1): it must sit under the ``maxsimd`` package.
PROTO_SUBDIR = Path("maxsimd") / "v1"


def generate(out_dir: os.PathLike | str,
             proto_dir: Optional[os.PathLike | str] = None) -> Path:
    """Writes the stubs under ``out_dir/maxsimd/v1`` and returns that folder.

    The files are generated into a temporary folder next to the target and
    moved into place one by one, so that a concurrent reader (two test runs
    sharing a build folder) never imports a half-written module.
    """
    try:
        from grpc_tools import protoc  # type: ignore[import-not-found]
    except ImportError as e:
        raise SystemExit(
            "build_stubs: grpc_tools is missing; on Debian/Ubuntu install "
            "python3-grpc-tools (scripts/install_deps.sh does)") from e
    proto_root = Path(proto_dir) if proto_dir else DEFAULT_PROTO_DIR
    sources = [proto_root / PROTO_SUBDIR / name for name in PROTO_FILES]
    for source in sources:
        if not source.is_file():
            raise SystemExit(f"build_stubs: {source} not found "
                             "(pass --proto-dir, the folder holding maxsimd/)")
    out = Path(out_dir).resolve()
    target = out / PROTO_SUBDIR
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target, prefix=".gen-") as tmp:
        # grpc_tools bundles the well-known .proto files next to itself; the
        # maxsimd protos import none of them, so only proto_root is needed.
        args = ["grpc_tools.protoc", f"-I{proto_root}",
                f"--python_out={tmp}", f"--grpc_python_out={tmp}"]
        args += [str(s) for s in sources]
        rc = protoc.main(args)
        if rc != 0:
            raise SystemExit(f"build_stubs: protoc failed with status {rc}")
        generated = Path(tmp) / PROTO_SUBDIR
        (generated / "__init__.py").write_text(
            '"""Generated from proto/maxsimd/v1 by build_stubs.py; '
            'do not edit."""\n')
        for path in sorted(generated.iterdir()):
            if path.suffix == ".py":
                os.replace(path, target / path.name)
    return target


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", default=str(HERE),
                        help="where maxsimd/v1/ is written "
                             "(default: %(default)s)")
    parser.add_argument("--proto-dir", default=str(DEFAULT_PROTO_DIR),
                        help="folder holding maxsimd/v1/*.proto "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    target = generate(args.out_dir, args.proto_dir)
    print(f"build_stubs: wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
