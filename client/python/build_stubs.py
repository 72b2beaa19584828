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

The .proto files (the folder holding ``maxsimd/v1/``) are, first found wins:
``--proto-dir``, ``$MAXSIMD_PROTO_DIR``, ``proto/`` next to this file (an
unpacked sdist, which carries a copy) and ``../../proto`` (a checkout).
setup.py calls ``generate`` while building a wheel.

This file imports nothing from the ``maxsimd`` package, so that it runs before
the stubs exist (the package cannot be imported without them).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence

HERE = Path(__file__).resolve().parent
# Where an sdist carries its copy of the protos, relative to this file.
SDIST_PROTO_DIR = "proto"
CHECKOUT_PROTO_DIR = HERE.parent.parent / "proto"
PROTO_FILES = ("types.proto", "reranker.proto", "admin.proto")
# The subpackage the generated code imports itself as (from the proto
# package maxsimd.v1): it must sit under the ``maxsimd`` package.
PROTO_SUBDIR = Path("maxsimd") / "v1"


def proto_sources(proto_root: os.PathLike | str) -> List[Path]:
    """The .proto files under ``proto_root``, in import order."""
    return [Path(proto_root) / PROTO_SUBDIR / name for name in PROTO_FILES]


def find_proto_dir(explicit: Optional[os.PathLike | str] = None) -> Path:
    """The folder holding ``maxsimd/v1/*.proto`` (see the module comment)."""
    candidates = [Path(p) for p in (explicit,
                                    os.environ.get("MAXSIMD_PROTO_DIR"))
                  if p]
    if candidates:  # named by the caller: used as it is, or reported
        return candidates[0]
    for root in (HERE / SDIST_PROTO_DIR, CHECKOUT_PROTO_DIR):
        if all(p.is_file() for p in proto_sources(root)):
            return root
    raise SystemExit(
        f"build_stubs: no maxsimd/v1/*.proto under {HERE / SDIST_PROTO_DIR} "
        f"or {CHECKOUT_PROTO_DIR}; pass --proto-dir or set "
        "MAXSIMD_PROTO_DIR to the folder holding maxsimd/")


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
    proto_root = find_proto_dir(proto_dir)
    sources = proto_sources(proto_root)
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
    parser.add_argument("--proto-dir", default=None,
                        help="folder holding maxsimd/v1/*.proto (default: "
                             "$MAXSIMD_PROTO_DIR, the sdist's proto/, or "
                             "the checkout's proto/)")
    args = parser.parse_args(argv)
    target = generate(args.out_dir, args.proto_dir)
    print(f"build_stubs: wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
