"""The asyncio client (client/python/maxsimd/aio.py) against a live server.

Every query path is checked against the blocking Client's answer on the
same server (the blocking client is itself checked against the numpy
reference in test_client.py) and against the numpy reference directly;
plus ``to_request``, typed admin results, error codes, retries on
UNAVAILABLE through an aio interceptor, many concurrent calls on one
channel, and a RerankBatch answer above gRPC's default 4 MiB receive
limit.
"""

from __future__ import annotations

import asyncio
import unittest
from typing import Any, AsyncIterator

import numpy as np

import support  # noqa: I100 - puts the package and its stubs on the path
from support import free_port, reference_scores

import grpc  # noqa: E402
import grpc.aio  # noqa: E402

import maxsimd  # noqa: E402

DIM = 32
NUM_DOCS = 120
ATOL = 1e-4
SERVER = support.ModuleServer()
setUpModule = SERVER.start  # noqa: N816 - unittest's name
tearDownModule = SERVER.stop  # noqa: N816


class CountingInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """Counts unary call attempts, as the retry loop makes them."""

    def __init__(self) -> None:
        self.calls = 0

    async def intercept_unary_unary(self, continuation: Any,
                                    client_call_details: Any,
                                    request: Any) -> Any:
        self.calls += 1
        return await continuation(client_call_details, request)


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):

    corpus = "py_aio"

    @classmethod
    def setUpClass(cls) -> None:
        cls.sync = support.set_up_live_class(cls, SERVER.target, NUM_DOCS,
                                             DIM, first_id=7000)

    async def asyncSetUp(self) -> None:  # noqa: N802 - unittest's name
        # The tests call the blocking client and numpy inside coroutines;
        # asyncio's debug mode (on in these tests) would log each as slow.
        asyncio.get_running_loop().slow_callback_duration = 10.0
        self.client = maxsimd.AsyncClient(SERVER.target)
        await self.client.wait_until_serving(timeout=10)
        try:
            await self.client.get_corpus(self.corpus)
        except maxsimd.NotFoundError:
            await self.client.create_corpus(self.corpus, DIM)
            added = await self.client.add_documents(self.corpus, self.ids,
                                                    self.docs,
                                                    chunk_bytes=4096)
            self.assertEqual(added.added, NUM_DOCS)

    async def asyncTearDown(self) -> None:  # noqa: N802
        await self.client.close()

    def query(self) -> np.ndarray:
        return support.near_query(self.rng, self.docs, 8)

    def assert_same(self, got: maxsimd.Result, want: maxsimd.Result) -> None:
        self.assertIsInstance(got, maxsimd.Result)
        self.assertEqual(got.str_ids, want.str_ids)
        np.testing.assert_array_equal(got.scores, want.scores)

    def assert_reference(self, got: maxsimd.Result, query: np.ndarray,
                         candidates: Any, top_k: int) -> None:
        pool = self.ids if candidates is None else np.asarray(candidates)
        index = {int(i): k for k, i in enumerate(self.ids)}
        ref = reference_scores(query, [self.docs[index[int(i)]]
                                       for i in pool])
        np.testing.assert_allclose(got.scores, np.sort(ref)[::-1][:top_k],
                                   atol=ATOL)

    async def test_rerank_and_batch_match_the_blocking_client(self) -> None:
        q = self.query()
        candidates = self.rng.choice(self.ids, 40, replace=False)
        got = await self.client.rerank(self.corpus, q, candidates, top_k=9,
                                       request_id="a1")
        self.assertEqual(got.request_id, "a1")
        self.assertGreater(got.timing.total_ns, 0)
        self.assert_same(got, self.sync.rerank(self.corpus, q, candidates,
                                               top_k=9))
        self.assert_reference(got, q, candidates, 9)
        empty = await self.client.rerank(self.corpus, q, [], top_k=3)
        self.assertEqual(len(empty), 0)

        queries = [self.query() for _ in range(4)]
        cands = [None, candidates, [], candidates[:5]]
        got_batch = await self.client.rerank_batch(self.corpus, queries,
                                                   cands, top_k=6)
        want_batch = self.sync.rerank_batch(self.corpus, queries, cands,
                                            top_k=6)
        self.assertEqual(len(got_batch), 4)
        for g, w in zip(got_batch, want_batch):
            self.assert_same(g, w)
        self.assert_reference(got_batch[0], queries[0], None, 6)

    async def test_to_request_matches_the_blocking_client(self) -> None:
        q = maxsimd.Query(self.corpus, self.query(), [7001, 7002], top_k=4,
                          request_id="t")
        request = self.client.to_request(q)
        self.assertIsNotNone(request)
        self.assertEqual(request.SerializeToString(),
                         self.sync.to_request(q).SerializeToString())
        self.assertEqual(list(request.candidate_ids), ["7001", "7002"])
        self.assertIsNone(self.client.to_request(maxsimd.Query(
            self.corpus, self.query(), [])))

    async def test_concurrent_calls_on_one_channel(self) -> None:
        queries = [self.query() for _ in range(24)]
        results = await asyncio.gather(*(
            self.client.rerank(self.corpus, q, top_k=5) for q in queries))
        for q, r in zip(queries, results):
            self.assert_same(r, self.sync.rerank(self.corpus, q, top_k=5))

    async def test_stream(self) -> None:
        queries = [maxsimd.Query(self.corpus, self.query(),
                                 None if i % 2 else
                                 self.rng.choice(self.ids, 30, replace=False),
                                 top_k=4)
                   for i in range(7)]
        want = list(self.sync.rerank_stream(queries))
        ordered = [r async for r in self.client.rerank_stream(queries)]
        self.assertEqual([r.request_id for r in ordered],
                         [str(i) for i in range(7)])
        for g, w in zip(ordered, want):
            self.assert_same(g, w)

        async def produce() -> AsyncIterator[maxsimd.Query]:
            for q in queries:
                await asyncio.sleep(0)  # a first stage doing its own awaits
                yield q

        arrived = [r async for r in self.client.rerank_stream(
            produce(), ordered=False)]
        self.assertEqual(sorted(int(r.request_id) for r in arrived),
                         list(range(7)))
        for r in arrived:
            self.assert_same(r, want[int(r.request_id)])

        bad = maxsimd.Query(self.corpus, np.ones((2, DIM + 1), np.float32))
        items = [r async for r in self.client.rerank_stream(
            [queries[0], bad, queries[0]], return_exceptions=True)]
        self.assertIsInstance(items[1], maxsimd.InvalidArgumentError)
        self.assert_same(items[2], items[0])
        with self.assertRaises(maxsimd.InvalidArgumentError):
            async for _ in self.client.rerank_stream([queries[0], bad]):
                pass

    async def test_typed_admin_results(self) -> None:
        name = "py_aio_admin"
        info = await self.client.create_corpus(name, 4,
                                               storage_dtype="bfloat16")
        self.assertIsInstance(info, maxsimd.CorpusInfo)
        self.assertEqual((info.name, info.dim, info.storage_dtype,
                          info.layout), (name, 4, "bfloat16", "dense"))
        added = await self.client.add_documents(
            name, ["x", "y"], [np.ones((2, 4), np.float32),
                               np.ones((3, 4), np.float32)])
        self.assertIsInstance(added, maxsimd.AddResult)
        self.assertEqual((added.added, added.corpus.num_tokens), (2, 5))
        self.assertEqual(await self.client.set_alias("py_aio_alias", name),
                         "")
        self.assertEqual((await self.client.list_aliases())["py_aio_alias"],
                         name)
        got = await self.client.get_corpus("py_aio_alias")
        self.assertEqual(got, self.sync.get_corpus(name))
        deleted = await self.client.delete_documents(name, ["x", "nope"],
                                                     ignore_missing=True)
        self.assertEqual(deleted, maxsimd.DeleteResult(deleted=1, missing=1))
        listed = await self.client.list_corpora()
        self.assertTrue(all(isinstance(c, maxsimd.CorpusInfo)
                            for c in listed))
        self.assertIn(name, [c.name for c in listed])
        before = await self.client.get_log_level()
        self.assertEqual(await self.client.set_log_level("debug"), before)
        self.assertEqual(await self.client.set_log_level(before), "debug")
        self.assertEqual(await self.client.health(), "SERVING")
        await self.client.delete_alias("py_aio_alias")
        await self.client.drop_corpus(name)
        with self.assertRaises(maxsimd.NotFoundError) as cm:
            await self.client.get_corpus(name)
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(cm.exception.method, "GetCorpus")

    async def test_large_batch_answer(self) -> None:
        name = "py_aio_long_ids"
        ids = support.long_ids()
        docs = support.large_corpus(self.rng)
        await self.client.create_corpus(name, support.LARGE_DIM)
        try:
            await self.client.add_documents(name, ids, docs)
            queries = support.large_queries(self.rng)
            top_k = support.LARGE_TOP_K
            results = await self.client.rerank_batch(name, queries,
                                                     top_k=top_k)
            # The ids alone are above gRPC's default 4 MiB receive limit.
            self.assertGreater(sum(len(i) for r in results
                                   for i in r.str_ids),
                               support.GRPC_DEFAULT_RECEIVE_BYTES)
            want = self.sync.rerank_batch(name, queries, top_k=top_k)
            for q, got, w in zip(queries, results, want):
                self.assert_same(got, w)
                self.assertEqual(sorted(got.str_ids), ids)
                np.testing.assert_allclose(
                    got.scores, np.sort(reference_scores(q, docs))[::-1],
                    atol=ATOL)
            async with maxsimd.AsyncClient(SERVER.target,
                                           max_message_bytes=4 << 20) as small:
                with self.assertRaises(maxsimd.ResourceExhaustedError):
                    await small.rerank_batch(name, queries, top_k=top_k)
        finally:
            await self.client.drop_corpus(name)

    async def test_errors_and_retries(self) -> None:
        with self.assertRaises(maxsimd.InvalidArgumentError) as cm:
            await self.client.rerank(self.corpus, np.ones((3, DIM // 2),
                                                          np.float32))
        self.assertEqual(cm.exception.method, "Rerank")
        with self.assertRaises(maxsimd.NotFoundError):
            await self.client.rerank(self.corpus, self.query(), [1, 2])

        counter = CountingInterceptor()
        dead = f"127.0.0.1:{free_port()}"  # nothing listens there
        async with maxsimd.AsyncClient(dead, max_retries=2, backoff=0.01,
                                       interceptors=[counter]) as client:
            with self.assertRaises(maxsimd.UnavailableError) as cm:
                await client.list_corpora(timeout=10)
            self.assertEqual(cm.exception.attempts, 3)
            self.assertEqual(counter.calls, 3)
            counter.calls = 0
            with self.assertRaises(maxsimd.UnavailableError):
                await client.create_corpus("never", DIM, timeout=10)
            self.assertEqual(counter.calls, 1)  # a write is tried once
            with self.assertRaises(maxsimd.DeadlineExceededError):
                await client.wait_until_serving(timeout=0.3)


if __name__ == "__main__":
    unittest.main()
