"""The Python client (client/python) against live maxsimd servers.

Starts the server binary (``MAXSIMD_SERVER_BIN``) on free ports with the CPU
backend, fills corpora through the admin API from numpy arrays, and checks
every query path against a numpy MaxSim reference: ids and scores,
tie-tolerant (an id set where scores tie). Also: error codes, deadlines,
retries on UNAVAILABLE, typed admin results (snapshots and imports under
--files_dir included), message limits (a RerankBatch answer above gRPC's
default 4 MiB; a multi-MiB AddDocuments load to a server whose limit is
1 MiB), client-side sharding over two servers (torch inputs included), and
the PyLate example.

Servers, stubs and the numpy reference come from ``support.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

import support  # noqa: I100 - puts the package and its stubs on the path
from support import (PACKAGE_DIR, SEED, TMP, ServerProcess, free_port, unit,
                     reference_scores)

import grpc  # noqa: E402

import maxsimd  # noqa: E402
from maxsimd._calls import DocumentLoad  # noqa: E402
from maxsimd._encode import to_bfloat16_bits  # noqa: E402
from maxsimd._pb import (reranker_pb2, reranker_pb2_grpc,  # noqa: E402
                         types_pb2)

try:
    import torch
except ImportError:  # the torch cases skip; everything else runs
    torch = None

DIM = 64
NUM_DOCS = 240
# Scores are fp32 sums of fp32 x fp16 products on both sides; only the
# summation order differs.
ATOL = 1e-4


# --------------------------------------------------------------------------
# Servers

SERVERS: Dict[str, ServerProcess] = {}
# The server-side files of "whole" (--files_dir): snapshots and imports.
FILES_DIR = Path(TMP.name) / "files"
# The message limit of "small" (--max_message_bytes).
SMALL_LIMIT = 1 << 20


def setUpModule() -> None:  # noqa: N802 - unittest's name
    FILES_DIR.mkdir(exist_ok=True)
    SERVERS["whole"] = ServerProcess.start(f"--files_dir={FILES_DIR}")
    for name in ("shard0", "shard1"):
        SERVERS[name] = ServerProcess.start()
    SERVERS["small"] = ServerProcess.start(
        f"--max_message_bytes={SMALL_LIMIT}")


def tearDownModule() -> None:  # noqa: N802
    for server in SERVERS.values():
        server.stop()


# --------------------------------------------------------------------------
# Data and the numpy reference


def make_docs(rng: np.random.Generator, n: int) -> List[np.ndarray]:
    return support.make_docs(rng, n, DIM)


class Fixture(unittest.TestCase):
    """A corpus of NUM_DOCS random documents with ids 1000.. on "whole"."""

    corpus = "py_docs"
    docs: List[np.ndarray]
    ids: np.ndarray

    @classmethod
    def setUpClass(cls) -> None:
        cls.client = support.set_up_live_class(cls, SERVERS["whole"].target,
                                               NUM_DOCS, DIM, first_id=1000)
        try:
            cls.client.get_corpus(cls.corpus)
        except maxsimd.NotFoundError:
            cls.client.create_corpus(cls.corpus, DIM)
            # Two streams: a list of arrays, then the ragged form.
            half = NUM_DOCS // 2
            cls.client.add_documents(cls.corpus, cls.ids[:half],
                                     cls.docs[:half], chunk_bytes=4096)
            rest = cls.docs[half:]
            cu = np.concatenate([[0], np.cumsum([len(d) for d in rest])])
            cls.client.add_documents(cls.corpus, cls.ids[half:],
                                     tokens=np.concatenate(rest),
                                     cu_seqlens=cu)

    def query(self, tokens: int = 8) -> np.ndarray:
        """A query near a random document, so that rankings are not flat."""
        return support.near_query(self.rng, self.docs, tokens)

    def assert_ranking(self, result: maxsimd.Result, query: np.ndarray,
                       candidates: Optional[Sequence[int]], top_k: int,
                       atol: float = ATOL) -> None:
        """Ids and scores equal the reference, up to ties."""
        pool = self.ids if candidates is None else np.asarray(candidates)
        index = {int(i): k for k, i in enumerate(self.ids)}
        ref = reference_scores(query, [self.docs[index[int(i)]] for i in pool])
        order = np.argsort(-ref, kind="stable")[:top_k]
        k = len(order)
        self.assertEqual(len(result), k)
        self.assertEqual(result.scores.dtype, np.float32)
        self.assertEqual(result.ids.dtype, np.int64)
        np.testing.assert_allclose(result.scores, ref[order], atol=atol)
        ref_by_id = dict(zip(pool.tolist(), ref.tolist()))
        got = result.ids.tolist()
        self.assertEqual(len(set(got)), k, "duplicate ids")
        for doc_id, score in zip(got, result.scores.tolist()):
            self.assertIn(doc_id, ref_by_id)
            self.assertAlmostEqual(score, ref_by_id[doc_id], delta=atol)
        # Where the reference has no near-tie, the order is exact.
        gaps = np.abs(np.diff(ref[order]))
        if k < 2 or gaps.min() > 4 * atol:
            self.assertEqual(got, pool[order].tolist())


# --------------------------------------------------------------------------
# Queries


class QueryTest(Fixture):

    def test_rerank_candidates(self) -> None:
        for top_k in (1, 7, 60):
            q = self.query()
            candidates = self.rng.choice(self.ids, size=60, replace=False)
            result = self.client.rerank(self.corpus, q, candidates,
                                        top_k=top_k, request_id="r1")
            self.assert_ranking(result, q, candidates, top_k)
            self.assertEqual(result.request_id, "r1")
            self.assertIsNotNone(result.timing)
            self.assertGreater(result.timing.total_ns, 0)
            # The same candidates as a list of strings rank the same.
            again = self.client.rerank(self.corpus, q,
                                       [str(i) for i in candidates],
                                       top_k=top_k)
            self.assertEqual(again.str_ids, result.str_ids)

    def test_scan(self) -> None:
        q = self.query(tokens=16)
        result = self.client.rerank(self.corpus, q, None, top_k=25)
        self.assert_ranking(result, q, None, 25)

    def test_float16_query(self) -> None:
        q = self.query().astype(np.float16)
        result = self.client.rerank(self.corpus, q, top_k=10)
        self.assert_ranking(result, q.astype(np.float32), None, 10)

    def test_bfloat16_wire(self) -> None:
        bits = to_bfloat16_bits(np.array([1.0, -2.5, 1.00390625, 3.0e-3],
                                         dtype=np.float32))
        # 1.00390625 is halfway between two bf16 values: rounds to even.
        self.assertEqual(bits.tolist(), [0x3F80, 0xC020, 0x3F80, 0x3B45])
        q = self.query()
        rounded = (to_bfloat16_bits(q).astype(np.uint32) << 16).view(
            np.float32)
        with maxsimd.Client(SERVERS["whole"].target,
                            send_dtype="bfloat16") as client:
            result = client.rerank(self.corpus, q, top_k=10)
        self.assert_ranking(result, rounded, None, 10)

    def test_dns_target_with_round_robin(self) -> None:
        # The form that addresses a shard's replicas: every address of the
        # name (here ::1 and 127.0.0.1, of which only one listens) under
        # round_robin, which sends calls to the ready ones.
        q = self.query()
        target = f"dns:///localhost:{SERVERS['whole'].port}"
        with maxsimd.Client(target) as client:
            for _ in range(4):
                result = client.rerank(self.corpus, q, top_k=5)
        self.assert_ranking(result, q, None, 5)

    def test_empty_candidates_is_empty_not_a_scan(self) -> None:
        result = self.client.rerank(self.corpus, self.query(), [], top_k=5)
        self.assertEqual(len(result), 0)

    def test_batch(self) -> None:
        queries = [self.query() for _ in range(4)]
        cands = [None, self.rng.choice(self.ids, 30, replace=False), [],
                 self.rng.choice(self.ids, 5, replace=False)]
        results = self.client.rerank_batch(self.corpus, queries, cands,
                                           top_k=8)
        self.assertEqual(len(results), 4)
        for q, c, r in zip(queries, cands, results):
            if c is not None and len(c) == 0:
                self.assertEqual(len(r), 0)
            else:
                self.assert_ranking(r, q, c, 8)

    def test_stream_ordered_and_unordered(self) -> None:
        queries = [maxsimd.Query(self.corpus, self.query(),
                                 None if i % 3 == 0 else
                                 self.rng.choice(self.ids, 40, replace=False),
                                 top_k=6)
                   for i in range(9)]
        ordered = list(self.client.rerank_stream(queries))
        self.assertEqual([r.request_id for r in ordered],
                         [str(i) for i in range(9)])
        for q, r in zip(queries, ordered):
            self.assert_ranking(r, q.query, q.candidates, 6)
        # Unordered, from a generator (not replayable): matched by id.
        arrived = list(self.client.rerank_stream(iter(queries), ordered=False))
        self.assertEqual(sorted(int(r.request_id) for r in arrived),
                         list(range(9)))
        for r in arrived:
            self.assertEqual(r.str_ids, ordered[int(r.request_id)].str_ids)

    def test_stream_bad_query_keeps_its_slot(self) -> None:
        good = maxsimd.Query(self.corpus, self.query(), top_k=3)
        bad = maxsimd.Query(self.corpus, np.ones((2, DIM + 1), np.float32))
        items = list(self.client.rerank_stream([good, bad, good],
                                               return_exceptions=True))
        self.assertIsInstance(items[0], maxsimd.Result)
        self.assertIsInstance(items[1], maxsimd.InvalidArgumentError)
        self.assertEqual(items[1].code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(items[2].str_ids, items[0].str_ids)
        with self.assertRaises(maxsimd.InvalidArgumentError):
            list(self.client.rerank_stream([good, bad, good]))
        with self.assertRaises(maxsimd.InvalidArgumentError):
            self.client.rerank_stream([maxsimd.Query(self.corpus, good.query,
                                                     request_id="x")] * 2)

    def test_stream_producer_failure_reaches_the_caller(self) -> None:
        good = maxsimd.Query(self.corpus, self.query(), top_k=3)

        def producer():
            yield good
            raise RuntimeError("first stage failed")

        seen = []
        with self.assertRaisesRegex(RuntimeError, "first stage failed"):
            for result in self.client.rerank_stream(producer()):
                seen.append(result)
        self.assertEqual(len(seen), 1)  # the query sent before the failure


# --------------------------------------------------------------------------
# Errors, deadlines, retries


class CountingInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Counts unary call attempts, as the retry loop makes them."""

    def __init__(self) -> None:
        self.calls = 0

    def intercept_unary_unary(self, continuation, details, request):
        self.calls += 1
        return continuation(details, request)


class ErrorTest(Fixture):

    def test_wrong_dim_is_invalid_argument(self) -> None:
        with self.assertRaises(maxsimd.InvalidArgumentError) as cm:
            self.client.rerank(self.corpus, np.ones((4, DIM // 2), np.float32))
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("dim", cm.exception.details)
        self.assertEqual(cm.exception.method, "Rerank")
        # A 1-D query is caught before any call, with the same type.
        with self.assertRaises(maxsimd.InvalidArgumentError):
            self.client.rerank(self.corpus, np.ones(DIM, np.float32))
        with self.assertRaises(ValueError):
            self.client.rerank(self.corpus, self.query(), [1.5, 2.0])

    def test_unknown_ids_and_corpora_are_not_found(self) -> None:
        with self.assertRaises(maxsimd.NotFoundError):
            self.client.rerank(self.corpus, self.query(), [1000, 999999])
        with self.assertRaises(maxsimd.NotFoundError) as cm:
            self.client.rerank("no_such_corpus", self.query())
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_deadline_exceeded_is_not_retried(self) -> None:
        # A server that answers after the deadline: with the real server a
        # query small enough to beat gRPC's deadline timer may still succeed.
        server = grpc.server(ThreadPoolExecutor(max_workers=2))
        reranker_pb2_grpc.add_RerankerServicer_to_server(
            FakeReranker(delay=0.5), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        counter = CountingInterceptor()
        try:
            with maxsimd.Client(f"127.0.0.1:{port}",
                                interceptors=[counter]) as client:
                with self.assertRaises(maxsimd.DeadlineExceededError) as cm:
                    client.rerank(self.corpus, self.query(), timeout=0.05)
        finally:
            server.stop(None)
        self.assertEqual(cm.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual(counter.calls, 1)

    def test_unavailable_is_retried_a_bounded_number_of_times(self) -> None:
        counter = CountingInterceptor()
        dead = f"127.0.0.1:{free_port()}"  # nothing listens there
        with maxsimd.Client(dead, max_retries=3, backoff=0.01,
                            interceptors=[counter]) as client:
            with self.assertRaises(maxsimd.UnavailableError) as cm:
                client.list_corpora(timeout=10)
            self.assertEqual(counter.calls, 4)
            self.assertEqual(cm.exception.attempts, 4)
            self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
            # A write that is not idempotent is tried once.
            counter.calls = 0
            with self.assertRaises(maxsimd.UnavailableError):
                client.create_corpus("never", DIM, timeout=10)
            self.assertEqual(counter.calls, 1)

    def test_retry_reaches_a_server_that_starts_late(self) -> None:
        counter = CountingInterceptor()
        port = free_port()
        late: List[ServerProcess] = []
        starter = threading.Timer(0.5, lambda: late.append(
            ServerProcess(port)))
        with maxsimd.Client(f"127.0.0.1:{port}", max_retries=100,
                            backoff=0.05, max_backoff=0.2,
                            interceptors=[counter]) as client:
            starter.start()
            try:
                # Until the server listens, every attempt is UNAVAILABLE and
                # retried.
                self.assertEqual(client.list_corpora(timeout=30), [])
            finally:
                starter.join()
                for server in late:
                    server.stop()
        self.assertGreater(counter.calls, 1)


# --------------------------------------------------------------------------
# TLS options of the client, against an in-process gRPC server (the
# server's own TLS and tokens are tested in tests/e2e/python_auth_test.py)


class FakeReranker(reranker_pb2_grpc.RerankerServicer):
    """Answers every Rerank with document "7", after `delay` seconds."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def Rerank(self, request, context):  # noqa: N802 - gRPC's name
        time.sleep(self.delay)
        return reranker_pb2.RerankResponse(
            request_id=request.request_id,
            results=[types_pb2.ScoredDocument(id="7", score=1.5)])


class TlsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = Path(TMP.name)
        cls.key, cls.cert = cls.dir / "tls.key", cls.dir / "tls.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
             "-keyout", str(cls.key), "-out", str(cls.cert), "-days", "1",
             "-subj", "/CN=maxsimd.test",
             "-addext", "subjectAltName=DNS:maxsimd.test"],
            check=True, capture_output=True)
        pair = [(cls.key.read_bytes(), cls.cert.read_bytes())]
        cls.servers = []
        cls.targets = []
        for mutual in (False, True):
            server = grpc.server(ThreadPoolExecutor(max_workers=2))
            reranker_pb2_grpc.add_RerankerServicer_to_server(FakeReranker(),
                                                             server)
            creds = grpc.ssl_server_credentials(
                pair, root_certificates=cls.cert.read_bytes(),
                require_client_auth=mutual)
            port = server.add_secure_port("127.0.0.1:0", creds)
            server.start()
            cls.servers.append(server)
            cls.targets.append(f"127.0.0.1:{port}")

    @classmethod
    def tearDownClass(cls) -> None:
        for server in cls.servers:
            server.stop(None)

    def rerank(self, target: str, tls: object) -> maxsimd.Result:
        with maxsimd.Client(target, tls=tls, max_retries=0) as client:
            return client.rerank("c", np.ones((1, 4), np.float32),
                                 timeout=10)

    def test_root_certificate_and_server_name_override(self) -> None:
        tls = maxsimd.TlsOptions(root_certificates=str(self.cert),
                                 server_name_override="maxsimd.test")
        self.assertEqual(self.rerank(self.targets[0], tls).str_ids, ["7"])
        # The certificate names maxsimd.test, not 127.0.0.1.
        with self.assertRaises(maxsimd.UnavailableError):
            self.rerank(self.targets[0], maxsimd.TlsOptions(
                root_certificates=self.cert.read_bytes()))

    def test_mutual_tls(self) -> None:
        tls = maxsimd.TlsOptions(root_certificates=self.cert.read_bytes(),
                                 private_key=str(self.key),
                                 certificate_chain=str(self.cert),
                                 server_name_override="maxsimd.test")
        self.assertEqual(self.rerank(self.targets[1], tls).str_ids, ["7"])
        with self.assertRaises(maxsimd.UnavailableError):
            self.rerank(self.targets[1], maxsimd.TlsOptions(
                root_certificates=self.cert.read_bytes(),
                server_name_override="maxsimd.test"))
        with self.assertRaises(ValueError):
            maxsimd.TlsOptions(private_key=str(self.key)).credentials()


# --------------------------------------------------------------------------
# Admin


class AdminTest(Fixture):

    def test_query_quantization_and_pool_factor(self) -> None:
        # An explicit query mode goes to an int8 corpus; None takes the
        # server's choice (the CPU backend's: float16 queries); False means
        # nothing for a dense corpus and True is refused there.
        for q, want in ((None, False), (False, False), (True, True)):
            name = f"py_q8_{q}"
            info = self.client.create_corpus(name, 8, layout="int8",
                                             quantize_queries=q)
            self.assertEqual(info.quantize_queries, want, q)
            self.client.drop_corpus(name)
        info = self.client.create_corpus("py_dense_q", 8,
                                         quantize_queries=False)
        self.assertFalse(info.quantize_queries)
        self.client.drop_corpus("py_dense_q")
        with self.assertRaises(maxsimd.InvalidArgumentError):
            self.client.create_corpus("py_dense_q", 8, quantize_queries=True)
        # Pooling: 5 tokens keep ceil(5 / 2) = 3, 1 keeps 1.
        info = self.client.create_corpus("py_pooled", 8, pool_factor=2)
        self.assertEqual(info.pool_factor, 2)
        rng = np.random.default_rng(3)
        docs = [rng.standard_normal((n, 8)).astype(np.float32)
                for n in (5, 1)]
        added = self.client.add_documents("py_pooled", ["a", "b"], docs)
        self.assertEqual(added.corpus.num_tokens, 4)
        self.assertEqual(self.client.get_corpus("py_pooled").pool_factor, 2)
        self.client.drop_corpus("py_pooled")

    def test_corpus_lifecycle(self) -> None:
        name = "py_admin"
        info = self.client.create_corpus(name, 8, storage_dtype="bfloat16",
                                         normalize=True)
        # Typed results: dataclasses with enums by short name, not
        # protobuf messages.
        self.assertIsInstance(info, maxsimd.CorpusInfo)
        self.assertEqual((info.name, info.dim, info.storage_dtype,
                          info.layout, info.normalize, info.num_documents),
                         (name, 8, "bfloat16", "dense", True, 0))
        with self.assertRaises(maxsimd.AlreadyExistsError):
            self.client.create_corpus(name, 8)
        with self.assertRaises(maxsimd.InvalidArgumentError):
            self.client.create_corpus("x", 8, layout="sparse")
        docs = [np.ones((n, 8), np.float32) for n in (1, 2, 3)]
        added = self.client.add_documents(name, ["a", "b", "c"], docs)
        self.assertIsInstance(added, maxsimd.AddResult)
        self.assertIsInstance(added.corpus, maxsimd.CorpusInfo)
        self.assertEqual(added.added, 3)
        self.assertEqual(added.corpus.num_tokens, 6)
        self.assertEqual(added.corpus.num_documents, 3)
        self.assertEqual(added.corpus.storage_dtype, "bfloat16")
        with self.assertRaises(maxsimd.AlreadyExistsError):
            self.client.add_documents(name, ["a"], docs[:1])
        with self.assertRaises(maxsimd.InvalidArgumentError):
            self.client.add_documents(name, ["d", "e"], docs[:1])

        self.assertEqual(self.client.set_alias("py_alias", name), "")
        self.assertEqual(self.client.list_aliases()["py_alias"], name)
        self.assertEqual(self.client.get_corpus("py_alias").num_documents, 3)
        # String ids: Result.ids refuses them, str_ids carries them.
        result = self.client.rerank("py_alias", np.ones((1, 8), np.float32))
        self.assertEqual(sorted(result.str_ids), ["a", "b", "c"])
        with self.assertRaises(ValueError):
            result.ids  # noqa: B018 - the property raises
        with self.assertRaises(maxsimd.FailedPreconditionError):
            self.client.drop_corpus(name)  # an alias points at it

        deleted = self.client.delete_documents(name, ["a", "zz"],
                                               ignore_missing=True)
        self.assertEqual(deleted, maxsimd.DeleteResult(deleted=1, missing=1))
        with self.assertRaises(maxsimd.NotFoundError):
            self.client.delete_documents(name, ["zz"])
        listed = {c.name: c for c in self.client.list_corpora()}
        self.assertIsInstance(listed[name], maxsimd.CorpusInfo)
        self.assertEqual(listed[name].num_documents, 2)
        self.assertEqual(listed[name].num_deleted, 1)
        self.assertEqual(listed[name], self.client.get_corpus(name))
        self.client.delete_alias("py_alias")
        self.client.drop_corpus(name)
        with self.assertRaises(maxsimd.NotFoundError):
            self.client.get_corpus(name)

    def test_log_level(self) -> None:
        before = self.client.get_log_level()
        self.assertEqual(self.client.set_log_level("debug"), before)
        self.assertEqual(self.client.get_log_level(), "debug")
        # spdlog's spelling is accepted and answered in the server's.
        self.assertEqual(self.client.set_log_level("warning"), "debug")
        self.assertEqual(self.client.get_log_level(), "warn")
        with self.assertRaises(maxsimd.InvalidArgumentError) as raised:
            self.client.set_log_level("loud")
        self.assertIn("level", str(raised.exception))
        self.assertEqual(self.client.get_log_level(), "warn")
        self.assertEqual(self.client.set_log_level(before), "warn")

    def test_snapshot_load_and_import(self) -> None:
        # SnapshotCorpus answers the document count, LoadCorpus the new
        # corpus's CorpusInfo, ImportDocuments an AddResult.
        path = "snapshots/py_docs"
        count = self.client.snapshot_corpus(self.corpus, path)
        self.assertIs(type(count), int)
        self.assertEqual(count, NUM_DOCS)
        with self.assertRaises(maxsimd.AlreadyExistsError):
            self.client.snapshot_corpus(self.corpus, path)
        loaded = self.client.load_corpus(path, "py_docs_loaded")
        try:
            self.assertIsInstance(loaded, maxsimd.CorpusInfo)
            self.assertEqual((loaded.name, loaded.dim, loaded.num_documents),
                             ("py_docs_loaded", DIM, NUM_DOCS))
            self.assertEqual(loaded.num_tokens,
                             self.client.get_corpus(self.corpus).num_tokens)
            q = self.query()
            want = self.client.rerank(self.corpus, q, top_k=10)
            got = self.client.rerank("py_docs_loaded", q, top_k=10)
            self.assertEqual(got.str_ids, want.str_ids)
            np.testing.assert_array_equal(got.scores, want.scores)
        finally:
            self.client.drop_corpus("py_docs_loaded")
        with self.assertRaises(maxsimd.NotFoundError):
            self.client.load_corpus("snapshots/none")

        docs = self.docs[:5]
        np.save(FILES_DIR / "tokens.npy", np.concatenate(docs))
        np.save(FILES_DIR / "cu_seqlens.npy", np.concatenate(
            [[0], np.cumsum([len(d) for d in docs])]).astype(np.int64))
        (FILES_DIR / "ids.txt").write_text("".join(
            f"imp-{i}\n" for i in range(5)))
        self.client.create_corpus("py_imported", DIM)
        try:
            added = self.client.import_documents(
                "py_imported", tokens_npy="tokens.npy",
                cu_seqlens_npy="cu_seqlens.npy", ids="ids.txt")
            self.assertIsInstance(added, maxsimd.AddResult)
            self.assertEqual((added.added, added.corpus.num_documents,
                              added.corpus.num_tokens),
                             (5, 5, sum(len(d) for d in docs)))
            q = self.query()
            result = self.client.rerank("py_imported", q, top_k=5)
            ref = reference_scores(q, docs)
            np.testing.assert_allclose(result.scores, np.sort(ref)[::-1],
                                       atol=ATOL)
        finally:
            self.client.drop_corpus("py_imported")


# --------------------------------------------------------------------------
# Message limits


class MessageLimitTest(unittest.TestCase):
    """A RerankBatch answer of about 5 MiB: above gRPC's default receive
    limit, received by a Client with default options."""

    corpus = "py_long_ids"

    @classmethod
    def setUpClass(cls) -> None:
        cls.rng = np.random.default_rng(SEED)
        cls.target = SERVERS["whole"].target
        cls.client = maxsimd.Client(cls.target)
        cls.ids = support.long_ids()
        cls.docs = support.large_corpus(cls.rng)
        cls.client.create_corpus(cls.corpus, support.LARGE_DIM)
        cls.client.add_documents(cls.corpus, cls.ids, cls.docs)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.drop_corpus(cls.corpus)
        cls.client.close()

    def test_large_batch_answer(self) -> None:
        queries = support.large_queries(self.rng)
        top_k = support.LARGE_TOP_K
        request = reranker_pb2.RerankBatchRequest(queries=[
            self.client.to_request(maxsimd.Query(self.corpus, q, None, top_k))
            for q in queries])
        # A plain gRPC channel refuses the answer: it is above 4 MiB.
        with grpc.insecure_channel(self.target) as channel:
            with self.assertRaises(grpc.RpcError) as cm:
                reranker_pb2_grpc.RerankerStub(channel).RerankBatch(
                    request, timeout=60)
        self.assertEqual(cm.exception.code(),
                         grpc.StatusCode.RESOURCE_EXHAUSTED)
        with grpc.insecure_channel(self.target, options=[
                ("grpc.max_receive_message_length", 64 << 20)]) as channel:
            raw = reranker_pb2_grpc.RerankerStub(channel).RerankBatch(
                request, timeout=60)
        self.assertGreater(raw.ByteSize(), support.GRPC_DEFAULT_RECEIVE_BYTES)

        # The client's default limits follow the server's (64 MiB).
        results = self.client.rerank_batch(self.corpus, queries, top_k=top_k)
        self.assertEqual(len(results), len(queries))
        for q, r, want in zip(queries, results, raw.results):
            self.assertEqual(r.str_ids, [d.id for d in want.results])
            self.assertEqual(sorted(r.str_ids), self.ids)
            ref = reference_scores(q, self.docs)
            np.testing.assert_allclose(r.scores, np.sort(ref)[::-1],
                                       atol=ATOL)

        self.assertEqual(maxsimd.DEFAULT_MAX_MESSAGE_BYTES, 64 << 20)
        # Overridable: a smaller limit, by argument or channel option.
        for kwargs in ({"max_message_bytes": 4 << 20},
                       {"channel_options": [
                           ("grpc.max_receive_message_length", 1 << 20)]}):
            with maxsimd.Client(self.target, **kwargs) as small:
                with self.assertRaises(maxsimd.ResourceExhaustedError):
                    small.rerank_batch(self.corpus, queries, top_k=top_k)
                # Small answers still pass.
                self.assertEqual(len(small.rerank(self.corpus, queries[0],
                                                  top_k=3)), 3)


class AddDocumentsLimitTest(unittest.TestCase):
    """add_documents against a server whose --max_message_bytes is 1 MiB:
    the client cuts a multi-MiB load to its own (matching) limit, and
    refuses a document that no message of that size can hold."""

    corpus = "py_small_messages"
    dim = 256

    @classmethod
    def setUpClass(cls) -> None:
        cls.rng = support.seeded_rng(cls)
        cls.target = SERVERS["small"].target

    def docs(self, *tokens: int) -> List[np.ndarray]:
        return [unit(self.rng.standard_normal((n, self.dim)))
                for n in tokens]

    def test_messages_fit_the_limit(self) -> None:
        # Every message of a load, as encoded, is within the limit (the
        # client's size bound is an upper bound), carries whole documents
        # and keeps their order.
        docs = self.docs(*([64] * 40), 1010, 3, 1010)
        ids = [f"d{i:03d}" for i in range(len(docs))]
        load = DocumentLoad(self.corpus, ids, docs, None, None, None,
                            8 << 20, SMALL_LIMIT)
        messages = list(load.messages())
        self.assertGreater(len(messages), 4)
        self.assertTrue(all(m.ByteSize() <= SMALL_LIMIT for m in messages),
                        [m.ByteSize() for m in messages])
        self.assertEqual([i for m in messages for i in m.ids], ids)
        self.assertEqual([c for m in messages for c in m.token_counts],
                         [len(d) for d in docs])

    def test_load_above_the_limit(self) -> None:
        docs = self.docs(*([64] * 48), 1000)  # 4 MiB as float32
        total = sum(d.nbytes for d in docs)
        self.assertGreater(total, 3 * SMALL_LIMIT)
        ids = list(range(len(docs)))
        # The server's limit is in force: a client whose own limit is the
        # 64 MiB default sends 8 MiB messages, which the server refuses.
        with maxsimd.Client(self.target) as loose:
            loose.create_corpus(self.corpus, self.dim)
            try:
                with self.assertRaises(maxsimd.ResourceExhaustedError):
                    loose.add_documents(self.corpus, ids, docs)
            finally:
                loose.drop_corpus(self.corpus)
        with maxsimd.Client(self.target,
                            max_message_bytes=SMALL_LIMIT) as client:
            client.create_corpus(self.corpus, self.dim)
            try:
                added = client.add_documents(self.corpus, ids, docs)
                self.assertEqual(added.added, len(docs))
                self.assertEqual(added.corpus.num_tokens,
                                 sum(len(d) for d in docs))
                q = docs[-1][:4]
                result = client.rerank(self.corpus, q, top_k=5)
                ref = reference_scores(q, docs)
                np.testing.assert_allclose(result.scores,
                                           np.sort(ref)[::-1][:5], atol=ATOL)
                self.assertEqual(result.ids[0], len(docs) - 1)

                # One document larger than a message: refused before any
                # call, naming it and the limit; the corpus is unchanged.
                big = self.docs(1100)  # 1.07 MiB as float32
                with self.assertRaises(ValueError) as cm:
                    client.add_documents(self.corpus, ["small", "big"],
                                         self.docs(2) + big)
                self.assertIsInstance(cm.exception,
                                      maxsimd.InvalidArgumentError)
                message = str(cm.exception)
                self.assertIn("document 1", message)
                self.assertIn("'big'", message)
                self.assertIn(str(SMALL_LIMIT), message)
                self.assertEqual(client.get_corpus(self.corpus).num_documents,
                                 len(docs))
                # As float16 it fits.
                added = client.add_documents(self.corpus, ["big"], big,
                                             send_dtype="float16")
                self.assertEqual(added.added, 1)
            finally:
                client.drop_corpus(self.corpus)


# --------------------------------------------------------------------------
# Sharding


class ShardedTest(Fixture):

    def test_merge_tie_rule(self) -> None:
        a = maxsimd.Result(["a1", "a2"], np.array([3.0, 1.0], np.float32))
        b = maxsimd.Result(["b1", "b2"], np.array([3.0, 2.0], np.float32))
        merged = maxsimd.merge_results([a, b], top_k=3)
        self.assertEqual(merged.str_ids, ["a1", "b1", "b2"])
        merged = maxsimd.merge_results([b, a], top_k=10)
        self.assertEqual(merged.str_ids, ["b1", "a1", "b2", "a2"])

    def test_two_shards_equal_one_server(self) -> None:
        targets = [SERVERS["shard0"].target, SERVERS["shard1"].target]
        with maxsimd.ShardedClient(targets) as sharded:
            sharded.create_corpus(self.corpus, DIM)
            added = sharded.add_documents(self.corpus, self.ids, self.docs)
            self.assertEqual(added, NUM_DOCS)
            sizes = [c.num_documents for c in sharded.get_corpus(self.corpus)]
            self.assertEqual(sum(sizes), NUM_DOCS)
            self.assertTrue(all(s > 0 for s in sizes), sizes)
            for s, part in enumerate(sharded.partition(self.ids)):
                self.assertEqual(len(part), sizes[s])

            for candidates in (None,
                               self.rng.choice(self.ids, 50, replace=False)):
                for top_k in (1, 10, 40):
                    q = self.query()
                    want = self.client.rerank(self.corpus, q, candidates,
                                              top_k=top_k)
                    got = sharded.rerank(self.corpus, q, candidates,
                                         top_k=top_k)
                    self.assertEqual(got.str_ids, want.str_ids)
                    np.testing.assert_array_equal(got.scores, want.scores)
                    self.assertIsNotNone(got.timing)

            queries = [self.query() for _ in range(3)]
            cands = [None, self.rng.choice(self.ids, 20, replace=False), None]
            want = self.client.rerank_batch(self.corpus, queries, cands,
                                            top_k=12)
            got = sharded.rerank_batch(self.corpus, queries, cands, top_k=12)
            for w, g in zip(want, got):
                self.assertEqual(g.str_ids, w.str_ids)
                np.testing.assert_array_equal(g.scores, w.scores)

            self.assertEqual(sharded.delete_documents(self.corpus,
                                                      self.ids[:10]), 10)
            scan = sharded.rerank(self.corpus, self.query(), top_k=NUM_DOCS)
            self.assertEqual(len(scan), NUM_DOCS - 10)
            sharded.drop_corpus(self.corpus)


class RecordingStreamInterceptor(grpc.StreamUnaryClientInterceptor):
    """Records the tokens' wire dtype of every AddDocuments message."""

    def __init__(self) -> None:
        self.dtypes: List[int] = []

    def intercept_stream_unary(self, continuation, details, requests):
        def recorded():
            for request in requests:
                self.dtypes.append(request.tokens.dtype)
                yield request
        return continuation(details, recorded())


class ShardedTorchTest(Fixture):

    @unittest.skipIf(torch is None, "torch is not importable")
    def test_bfloat16_tensors_that_require_grad(self) -> None:
        corpus = "py_sharded_torch"
        docs = self.docs[:24]
        bf16 = [torch.from_numpy(d).to(torch.bfloat16).requires_grad_()
                for d in docs]
        stored = [t.detach().double().numpy() for t in bf16]
        cu = torch.tensor([0] + np.cumsum([len(d) for d in docs[12:]])
                          .tolist())
        ragged = torch.cat([t.detach() for t in bf16[12:]]).requires_grad_()
        recorder = RecordingStreamInterceptor()
        targets = [SERVERS["shard0"].target, SERVERS["shard1"].target]
        with maxsimd.ShardedClient(targets,
                                   interceptors=[recorder]) as sharded:
            sharded.create_corpus(corpus, DIM)
            try:
                # A list of tensors, then ragged tokens + cu_seqlens (as
                # keywords and as the docs tuple).
                self.assertEqual(sharded.add_documents(
                    corpus, torch.arange(12), bf16[:12]), 12)
                self.assertEqual(sharded.add_documents(
                    corpus, np.arange(12, 18),
                    tokens=ragged[:int(cu[6])], cu_seqlens=cu[:7]), 6)
                tail = ragged[int(cu[6]):]
                self.assertEqual(sharded.add_documents(
                    corpus, list(range(18, 24)),
                    (tail, cu[6:] - cu[6])), 6)
                # bfloat16 travels as bfloat16.
                self.assertTrue(recorder.dtypes)
                self.assertEqual(set(recorder.dtypes),
                                 {types_pb2.DTYPE_BFLOAT16})
                sizes = [c.num_documents for c in sharded.get_corpus(corpus)]
                self.assertEqual(sum(sizes), 24)
                self.assertTrue(all(s > 0 for s in sizes), sizes)
                q = self.query()
                result = sharded.rerank(corpus, q, top_k=24)
                ref = reference_scores(q, stored)
                np.testing.assert_allclose(result.scores, np.sort(ref)[::-1],
                                           atol=ATOL)
                by_id = dict(enumerate(ref.tolist()))
                for doc_id, score in zip(result.ids.tolist(),
                                         result.scores.tolist()):
                    self.assertAlmostEqual(score, by_id[doc_id], delta=ATOL)
                # A bad document is refused before any shard adds its part.
                with self.assertRaises(maxsimd.InvalidArgumentError):
                    sharded.add_documents(corpus, [100, 101], [
                        bf16[0], torch.ones(3, DIM + 1)])
                self.assertEqual(sum(c.num_documents for c in
                                     sharded.get_corpus(corpus)), 24)
            finally:
                sharded.drop_corpus(corpus)


# --------------------------------------------------------------------------
# The example


class ExampleTest(unittest.TestCase):

    def test_pylate_example_runs(self) -> None:
        # The example imports the package as installed; from the checkout,
        # PYTHONPATH stands in for the installation.
        script = PACKAGE_DIR / "examples" / "pylate_rerank.py"
        env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR))
        out = subprocess.run(
            [sys.executable, str(script), "--target", SERVERS["whole"].target,
             "--docs", "300", "--queries", "3", "--candidates", "50"],
            capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("rankings match", out.stdout)
        self.assertIn("loaded 300 documents", out.stdout)


if __name__ == "__main__":
    unittest.main()
