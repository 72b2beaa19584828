"""Packaging of the Python client (client/python: setup.py, MANIFEST.in,
pyproject.toml, build_stubs.py): the package installs and runs from a wheel
built from its sdist alone, and from the source folder, in fresh virtual
environments, offline.

The checkout's client/python and proto/ are copied into a temporary folder
first, so that building leaves the source tree untouched. Then, as
client/python/README.md ("Install") documents:

1. ``python3 -m build --sdist --no-isolation``; the sdist must carry
   build_stubs.py and the .proto files, and no generated stubs;
2. the sdist is unpacked where no ``../../proto`` exists and a wheel is built
   from it (``--wheel --no-isolation``); the wheel must carry the stubs;
3. ``python3 -m venv --system-site-packages`` and ``pip install
   --no-build-isolation --no-index`` of the wheel, and, in a second venv, of
   the source folder;
4. with each venv's python, outside the checkout and without PYTHONPATH or
   MAXSIMD_STUBS_DIR, a script checks that ``maxsimd`` and its stubs load
   from that venv, and calls a live server (blocking and asyncio clients);
   its answers are checked against the numpy MaxSim reference.

Needs python3-build, python3-venv and python3-pip besides the client's own
dependencies; the interpreter is this test's (ctest: MAXSIMD_PYTHON).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import unittest
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

import support  # noqa: I100 - puts the package and its stubs on the path
from support import REPO, SEED, TMP, reference_scores

SERVER = support.ModuleServer()
setUpModule = SERVER.start  # noqa: N816 - unittest's name
tearDownModule = SERVER.stop  # noqa: N816
PROTOS = ("types.proto", "reranker.proto", "admin.proto")
STUBS = ("types_pb2.py", "reranker_pb2.py", "reranker_pb2_grpc.py",
         "admin_pb2.py", "admin_pb2_grpc.py")

# Run by each venv's python, from a folder outside the checkout.
SMOKE = r'''
import asyncio, json, sys
import numpy as np
import maxsimd
from maxsimd.v1 import reranker_pb2

target, prefix, data, corpus = sys.argv[1:5]
where = {"maxsimd": maxsimd.__file__, "stubs": reranker_pb2.__file__}
for name, path in where.items():
    assert path.startswith(prefix), f"{name} loaded from {path}"
stored = np.load(data)
docs = [stored[f"doc{i}"] for i in range(int(stored["n"]))]
query = stored["query"]
with maxsimd.Client(target) as client:
    info = client.create_corpus(corpus, query.shape[1])
    added = client.add_documents(corpus, list(range(len(docs))), docs)
    scan = client.rerank(corpus, query, top_k=len(docs))


async def rerank_async():
    async with maxsimd.AsyncClient(target) as client:
        return await client.rerank(corpus, query, [1, 3], top_k=2)

subset = asyncio.run(rerank_async())
print(json.dumps({
    "where": where, "info": type(info).__name__, "added": added.added,
    "scan_ids": scan.ids.tolist(), "scan_scores": scan.scores.tolist(),
    "subset_ids": subset.ids.tolist(),
    "subset_scores": subset.scores.tolist()}))
'''


def run(args: List[Any], cwd: Path, env: Optional[Dict[str, str]] = None,
        timeout: float = 180) -> str:
    out = subprocess.run([str(a) for a in args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed with "
                             f"{out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out.stdout


class PackagingTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        if importlib.util.find_spec("build") is None:
            raise AssertionError(
                "python -m build is missing: install python3-build")
        cls.root = Path(TMP.name) / "packaging"
        cls.root.mkdir()
        # Data for the smoke script, and the reference it is checked with.
        rng = np.random.default_rng(SEED)
        cls.docs = [rng.standard_normal((n, 16)).astype(np.float32)
                    for n in (3, 9, 5, 1, 12)]
        cls.query = rng.standard_normal((4, 16)).astype(np.float32)
        cls.data = cls.root / "data.npz"
        np.savez(cls.data, n=len(cls.docs), query=cls.query,
                 **{f"doc{i}": d for i, d in enumerate(cls.docs)})
        (cls.root / "smoke.py").write_text(SMOKE)
        # A clean environment: nothing points back into the checkout.
        cls.env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "MAXSIMD_STUBS_DIR",
                                "MAXSIMD_PROTO_DIR", "PYTHONHOME")}

    def checkout(self, name: str) -> Path:
        """client/python and proto/ as they sit in a checkout, copied (the
        build writes into the source folder); the package folder."""
        src = self.root / name
        ignore = shutil.ignore_patterns("build", "dist", "*.egg-info", "v1",
                                        "__pycache__", ".mypy_cache")
        shutil.copytree(REPO / "client" / "python",
                        src / "client" / "python", ignore=ignore)
        shutil.copytree(REPO / "proto" / "maxsimd", src / "proto" / "maxsimd")
        return src / "client" / "python"

    def venv(self, name: str) -> Path:
        """A fresh venv that sees the system's packages; its python."""
        path = self.root / name
        run([sys.executable, "-m", "venv", "--system-site-packages", path],
            self.root, self.env)
        return path

    def pip_install(self, venv: Path, what: Path) -> None:
        run([venv / "bin" / "python", "-m", "pip", "install",
             "--no-build-isolation", "--no-index",
             "--disable-pip-version-check", what], self.root, self.env)

    def smoke(self, venv: Path, corpus: str) -> None:
        site = run([venv / "bin" / "python", "-c",
                    "import sysconfig; print(sysconfig.get_paths()"
                    "['purelib'])"], self.root, self.env).strip()
        out = run([venv / "bin" / "python", self.root / "smoke.py",
                   SERVER.target, site, self.data, corpus],
                  self.root, self.env)
        got: Dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        for path in got["where"].values():
            self.assertTrue(path.startswith(site), path)
        self.assertEqual(got["info"], "CorpusInfo")
        self.assertEqual(got["added"], len(self.docs))
        ref = reference_scores(self.query, self.docs)
        self.assertEqual(got["scan_ids"],
                         np.argsort(-ref, kind="stable").tolist())
        np.testing.assert_allclose(got["scan_scores"], np.sort(ref)[::-1],
                                   atol=1e-4)
        sub = {1: ref[1], 3: ref[3]}
        self.assertEqual(got["subset_ids"], sorted(sub, key=lambda i: -sub[i]))
        np.testing.assert_allclose(got["subset_scores"],
                                   sorted(sub.values(), reverse=True),
                                   atol=1e-4)

    def test_wheel_built_from_the_sdist(self) -> None:
        dist = self.root / "dist"
        run([sys.executable, "-m", "build", "--sdist", "--no-isolation",
             "--outdir", dist, self.checkout("src-sdist")], self.root,
            self.env)
        sdists = list(dist.glob("maxsimd-*.tar.gz"))
        self.assertEqual(len(sdists), 1, sdists)
        with tarfile.open(sdists[0]) as tar:
            names = tar.getnames()
            top = names[0].split("/")[0]
            unpacked = self.root / "unpacked"
            tar.extractall(unpacked)
        files = {n.split("/", 1)[1] for n in names if "/" in n}
        for needed in ["build_stubs.py", "setup.py", "pyproject.toml",
                       "maxsimd/__init__.py", "maxsimd/py.typed"] + [
                           f"proto/maxsimd/v1/{p}" for p in PROTOS]:
            self.assertIn(needed, files)
        self.assertFalse([f for f in files if f.startswith("maxsimd/v1/")],
                         "generated stubs in the sdist")
        # Nothing to fall back on: the wheel is built from the sdist alone.
        sdist_dir = unpacked / top
        self.assertFalse((sdist_dir / ".." / ".." / "proto").exists())
        wheels = self.root / "wheels"
        run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
             "--outdir", wheels, sdist_dir], self.root, self.env)
        built = list(wheels.glob("maxsimd-*.whl"))
        self.assertEqual(len(built), 1, built)
        with zipfile.ZipFile(built[0]) as whl:
            members = set(whl.namelist())
        for stub in STUBS:
            self.assertIn(f"maxsimd/v1/{stub}", members)
        self.assertIn("maxsimd/py.typed", members)

        venv = self.venv("venv-wheel")
        self.pip_install(venv, built[0])
        self.smoke(venv, "py_pkg_wheel")

    def test_pip_install_of_the_source_folder(self) -> None:
        venv = self.venv("venv-source")
        self.pip_install(venv, self.checkout("src-pip"))
        self.smoke(venv, "py_pkg_source")


if __name__ == "__main__":
    unittest.main()
