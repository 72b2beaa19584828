"""The Python client's ``token=`` option against live maxsimd servers.

One server in plaintext with admin tokens (two in one file, as during a
rotation) and ``--query_auth=token``; one with TLS (a certificate made by
``openssl`` now) and an admin token. Checks that the token reaches the
server as ``authorization: Bearer <token>`` metadata, that refused calls
raise ``UnauthenticatedError`` / ``PermissionDeniedError`` and change
nothing, and that a token gRPC could not send is refused before any call.

Needs ``MAXSIMD_SERVER_BIN``; the stubs come from ``MAXSIMD_STUBS_DIR`` or
are generated into a temporary folder.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import List, Optional

import numpy as np

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO / "client" / "python"
SERVER_BIN = os.environ.get("MAXSIMD_SERVER_BIN", "")
_TMP = tempfile.TemporaryDirectory(prefix="maxsimd-pyauth-")

sys.path.insert(0, str(PACKAGE_DIR))
if not os.environ.get("MAXSIMD_STUBS_DIR"):
    import build_stubs  # noqa: E402

    build_stubs.generate(_TMP.name)
    os.environ["MAXSIMD_STUBS_DIR"] = _TMP.name

import maxsimd  # noqa: E402

ADMIN_TOKEN = "py-admin-token-0123456789abcdef"
ROTATED_TOKEN = "py-rotated-token-fedcba9876543210"
QUERY_TOKEN = "py-query-token-00112233445566778"
WRONG_TOKEN = "py-wrong-token-zzzzzzzzzzzzzzzzzz"
DIM = 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write(name: str, text: str) -> str:
    path = Path(_TMP.name) / name
    path.write_text(text)
    path.chmod(0o600)  # the server refuses secret files others can read
    return str(path)


class Server:
    """One maxsimd child process (CPU backend) on a free port."""

    def __init__(self, *flags: str,
                 tls: Optional[maxsimd.TlsOptions] = None) -> None:
        self.target = f"127.0.0.1:{free_port()}"
        self.log_path = Path(_TMP.name) / f"{self.target.replace(':', '_')}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [SERVER_BIN, f"--listen={self.target}", "--metrics_listen=",
                 "--cpu", "--log_level=info", "--drain_timeout=1s", *flags],
                stdout=log, stderr=subprocess.STDOUT)
        # Health needs no token.
        with maxsimd.Client(self.target, tls=tls) as client:
            deadline = time.monotonic() + 30
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"maxsimd exited:\n{self.log()}")
                try:
                    client.wait_until_serving(timeout=0.5)
                    return
                except maxsimd.MaxsimdError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def docs(n: int) -> List[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal((3, DIM)).astype(np.float32)
            for _ in range(n)]


class TokenTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        if not os.access(SERVER_BIN, os.X_OK):
            raise RuntimeError("set MAXSIMD_SERVER_BIN to the maxsimd binary")
        cls.server = Server(
            "--admin_token_file=" + write(
                "admin-tokens", f"# rotation\n{ADMIN_TOKEN}\n{ROTATED_TOKEN}\n"),
            "--query_auth=token",
            "--query_token_file=" + write("query-tokens", QUERY_TOKEN + "\n"))
        cls.admin = maxsimd.Client(cls.server.target, token=ADMIN_TOKEN,
                                   max_retries=0)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.admin.close()
        cls.server.stop()
        log = cls.server.log()
        for token in (ADMIN_TOKEN, ROTATED_TOKEN, QUERY_TOKEN, WRONG_TOKEN):
            assert token not in log, "a token reached the server's log"

    def client(self, token: Optional[str]) -> maxsimd.Client:
        client = maxsimd.Client(self.server.target, token=token,
                                max_retries=0)
        self.addCleanup(client.close)
        return client

    def test_admin_token_and_rotation(self) -> None:
        self.admin.create_corpus("rot", DIM)
        rotated = self.client(ROTATED_TOKEN)
        rotated.add_documents("rot", [1, 2], docs(2))
        self.assertEqual(self.admin.get_corpus("rot").num_documents, 2)
        self.assertIn("rot", [c.name for c in rotated.list_corpora()])

    def test_missing_token_is_unauthenticated_and_not_performed(self) -> None:
        anonymous = self.client(None)
        with self.assertRaises(maxsimd.UnauthenticatedError) as e:
            anonymous.create_corpus("never", DIM)
        self.assertIn("Admin.CreateCorpus", e.exception.details)
        with self.assertRaises(maxsimd.NotFoundError):
            self.admin.get_corpus("never")
        self.admin.create_corpus("kept", DIM)
        with self.assertRaises(maxsimd.UnauthenticatedError):
            anonymous.add_documents("kept", [1, 2, 3], docs(3))
        self.assertEqual(self.admin.get_corpus("kept").num_documents, 0)

    def test_wrong_token_is_unauthenticated_and_not_performed(self) -> None:
        self.admin.create_corpus("stays", DIM)
        wrong = self.client(WRONG_TOKEN)
        with self.assertRaises(maxsimd.UnauthenticatedError) as e:
            wrong.drop_corpus("stays")
        self.assertNotIn(WRONG_TOKEN, str(e.exception))
        self.assertEqual(self.admin.get_corpus("stays").name, "stays")

    def test_query_token(self) -> None:
        self.admin.create_corpus("q", DIM)
        self.admin.add_documents("q", [10, 11, 12], docs(3))
        query = np.ones((2, DIM), np.float32)
        reader = self.client(QUERY_TOKEN)
        result = reader.rerank("q", query, top_k=2)
        self.assertEqual(len(result), 2)
        self.assertEqual(len(reader.rerank_batch("q", [query, query])), 2)
        self.assertEqual(len(self.admin.rerank("q", query, top_k=3)), 3)
        with self.assertRaises(maxsimd.PermissionDeniedError):
            reader.drop_corpus("q")
        with self.assertRaises(maxsimd.UnauthenticatedError):
            self.client(None).rerank("q", query)
        with self.assertRaises(maxsimd.UnauthenticatedError):
            self.client(WRONG_TOKEN).rerank("q", query)
        self.assertEqual(self.admin.get_corpus("q").num_documents, 3)
        # Health stays open.
        self.assertEqual(self.client(None).health(), "SERVING")

    def test_bad_tokens_are_refused_before_any_call(self) -> None:
        for token in ("two words-0123456789", "", "tab\there-0123456789"):
            with self.assertRaises(maxsimd.InvalidArgumentError) as e:
                maxsimd.Client(self.server.target, token=token)
            if token:
                self.assertNotIn(token, str(e.exception))
        with self.assertRaises(ValueError):
            maxsimd.Client(self.server.target, token=ADMIN_TOKEN,
                           metadata=[("authorization", "Bearer x")])
        # Other metadata goes along with the token.
        with maxsimd.Client(self.server.target, token=ADMIN_TOKEN,
                            metadata=[("x-request-id", "py-77")]) as client:
            self.assertIsInstance(client.list_corpora(), list)


class TlsTokenTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        if not os.access(SERVER_BIN, os.X_OK):
            raise RuntimeError("set MAXSIMD_SERVER_BIN to the maxsimd binary")
        key, cert = Path(_TMP.name) / "tls.key", Path(_TMP.name) / "tls.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key),
             "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            check=True, capture_output=True)
        cls.tls = maxsimd.TlsOptions(root_certificates=str(cert))
        cls.server = Server(
            f"--tls_cert={cert}", f"--tls_key={key}",
            "--admin_token_file=" + write("tls-admin", ADMIN_TOKEN),
            tls=cls.tls)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def test_token_over_tls(self) -> None:
        with maxsimd.Client(self.server.target, tls=self.tls,
                            token=ADMIN_TOKEN, max_retries=0) as client:
            client.create_corpus("tls", DIM)
            client.add_documents("tls", [1], docs(1))
            self.assertEqual(len(client.rerank("tls", docs(1)[0])), 1)
        with maxsimd.Client(self.server.target, tls=self.tls,
                            max_retries=0) as anonymous:
            with self.assertRaises(maxsimd.UnauthenticatedError):
                anonymous.drop_corpus("tls")
            # Queries are open by default.
            self.assertEqual(len(anonymous.rerank("tls", docs(1)[0])), 1)
        # Plaintext to a TLS port fails.
        with maxsimd.Client(self.server.target, token=ADMIN_TOKEN,
                            max_retries=0) as plain:
            with self.assertRaises(maxsimd.UnavailableError):
                plain.list_corpora(timeout=5)


def tearDownModule() -> None:  # noqa: N802 - unittest's name
    _TMP.cleanup()


if __name__ == "__main__":
    unittest.main()
