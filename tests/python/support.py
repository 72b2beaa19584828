"""What the Python client's test suites share: the package on the path, the
stubs, live maxsimd servers, and a numpy MaxSim reference.

Importing this module puts ``client/python`` first on ``sys.path`` and makes
sure the stubs exist: ``MAXSIMD_STUBS_DIR`` when set (ctest generates them
into the build folder), otherwise they are generated into a temporary
folder, so that ``python3 -m unittest test_x`` also runs by itself.

The server binary is ``MAXSIMD_SERVER_BIN`` (ctest passes the one it built).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, List, Optional, Sequence

import numpy as np

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO / "client" / "python"
SERVER_BIN = os.environ.get("MAXSIMD_SERVER_BIN",
                            str(REPO / "build" / "server" / "maxsimd"))
TMP = tempfile.TemporaryDirectory(prefix="maxsimd-pytest-")

sys.path.insert(0, str(PACKAGE_DIR))
if not os.environ.get("MAXSIMD_STUBS_DIR"):
    import build_stubs  # noqa: E402

    build_stubs.generate(TMP.name)
    os.environ["MAXSIMD_STUBS_DIR"] = TMP.name

import maxsimd  # noqa: E402

SEED = int(os.environ.get("MAXSIMD_TEST_SEED", "20240611"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ServerProcess:
    """One maxsimd child process on a free port (CPU backend)."""

    def __init__(self, port: Optional[int] = None, *flags: str) -> None:
        self.port = port or free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.log_path = Path(TMP.name) / f"server-{self.port}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [SERVER_BIN, f"--listen={self.target}", "--metrics_listen=",
                 "--cpu", "--log_level=warn", "--max_queue_delay=0",
                 "--drain_timeout=1s", *flags],
                stdout=log, stderr=subprocess.STDOUT)

    @classmethod
    def start(cls, *flags: str) -> "ServerProcess":
        """Starts and waits for SERVING; a new port if the first was taken."""
        if not os.access(SERVER_BIN, os.X_OK):
            raise RuntimeError(f"server binary {SERVER_BIN} not found; build "
                               "it or set MAXSIMD_SERVER_BIN")
        last = ""
        for _ in range(3):
            server = cls(None, *flags)
            try:
                server.wait_serving()
                return server
            except Exception as e:  # noqa: BLE001 - retried, then reported
                last = f"{e}\n{server.log()}"
                server.stop()
        raise RuntimeError(f"maxsimd did not start: {last}")

    def wait_serving(self, timeout: float = 30.0) -> None:
        with maxsimd.Client(self.target) as client:
            deadline = time.monotonic() + timeout
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"exited with status {self.proc.returncode}")
                try:
                    client.wait_until_serving(timeout=0.5)
                    return
                except maxsimd.DeadlineExceededError:
                    if time.monotonic() > deadline:
                        raise

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ModuleServer:
    """One server for the tests of a module, started before them and stopped
    after them::

        SERVER = support.ModuleServer()
        setUpModule = SERVER.start
        tearDownModule = SERVER.stop
    """

    def __init__(self, *flags: str) -> None:
        self.flags = flags
        self.server: Optional[ServerProcess] = None

    def start(self) -> None:
        self.server = ServerProcess.start(*self.flags)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    @property
    def target(self) -> str:
        if self.server is None:
            raise RuntimeError("the module's server is not running")
        return self.server.target


def seeded_rng(cls: type) -> np.random.Generator:
    """A test class's generator; prints the seed under the class's name
    (``MAXSIMD_TEST_SEED`` replays it)."""
    print(f"\n{cls.__name__}: seed {SEED}", file=sys.stderr)
    return np.random.default_rng(SEED)


def set_up_live_class(cls: Any, target: str, num_docs: int, dim: int,
                      max_tokens: int = 40, first_id: Optional[int] = None
                      ) -> "maxsimd.Client":
    """The start of a test class against a live server: sets ``cls.rng``
    (``seeded_rng``), ``cls.docs`` (``num_docs`` random documents of
    ``dim``) and, with ``first_id``, ``cls.ids`` (int64 ids from
    ``first_id`` on); returns a blocking Client of ``target`` that is
    closed after the class's tests."""
    cls.rng = seeded_rng(cls)
    cls.docs = make_docs(cls.rng, num_docs, dim, max_tokens=max_tokens)
    if first_id is not None:
        cls.ids = np.arange(first_id, first_id + num_docs, dtype=np.int64)
    client = maxsimd.Client(target)
    cls.addClassCleanup(client.close)
    return client


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def make_docs(rng: np.random.Generator, n: int, dim: int,
              max_tokens: int = 40) -> List[np.ndarray]:
    """Unit-norm documents of 1..max_tokens tokens (one-token documents
    included)."""
    return [unit(rng.standard_normal((int(rng.integers(1, max_tokens + 1)),
                                      dim)))
            for _ in range(n)]


def near_query(rng: np.random.Generator, docs: Sequence[np.ndarray],
               tokens: int, noise: float = 0.5) -> np.ndarray:
    """A unit-norm query of ``tokens`` rows of a random document plus noise,
    so that rankings are not flat."""
    doc = docs[int(rng.integers(len(docs)))]
    rows = rng.integers(0, len(doc), size=tokens)
    return unit(doc[rows] + noise * rng.standard_normal((tokens,
                                                         doc.shape[1])))


def reference_scores(query: np.ndarray, docs: Sequence[np.ndarray]
                     ) -> np.ndarray:
    """MaxSim of the query against documents stored as fp16, in float64."""
    q = np.asarray(query, dtype=np.float64)
    return np.array([(q @ np.asarray(d).astype(np.float16)
                      .astype(np.float64).T).max(axis=1).sum() for d in docs])


# --------------------------------------------------------------------------
# A corpus whose answers are large: ids of 200 bytes, so that a RerankBatch
# of LARGE_BATCH queries x LARGE_TOP_K documents is about 5 MiB, above
# gRPC's default 4 MiB receive limit (and far below the server's 64 MiB).

LARGE_DOCS = 1024
LARGE_DIM = 8
LARGE_BATCH = 24
LARGE_TOP_K = 1024
GRPC_DEFAULT_RECEIVE_BYTES = 4 << 20


def long_ids(n: int = LARGE_DOCS) -> List[str]:
    return [f"{i:06d}-" + "x" * 193 for i in range(n)]


def large_corpus(rng: np.random.Generator) -> List[np.ndarray]:
    """LARGE_DOCS one-token documents of LARGE_DIM."""
    return [rng.standard_normal((1, LARGE_DIM)).astype(np.float32)
            for _ in range(LARGE_DOCS)]


def large_queries(rng: np.random.Generator) -> List[np.ndarray]:
    return [rng.standard_normal((2, LARGE_DIM)).astype(np.float32)
            for _ in range(LARGE_BATCH)]
