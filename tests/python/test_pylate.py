"""The PyLate adapter (client/python/maxsimd/pylate.py) driven the way
PyLate drives its indexes, against a live server.

PyLate itself is not installed here, so the calls its pipeline makes are
reproduced from its source (PyLate 1.4.0, github.com/lightonai/pylate):

- ``pylate_retrieve`` mirrors ``BaseRetriever.retrieve``
  (``pylate/retrieve/base.py``), which ``retrieve.ColBERT`` inherits: an
  index whose ``is_end_to_end_index`` is true gets
  ``index(queries_embeddings=..., k=..., subset=...)`` and its answer is
  the retriever's answer. (PyLate 1.3's ``retrieve/colbert.py`` makes the
  same call for every index that is not a ``Voyager``.)
- ``encode_like_pylate`` returns embeddings in the shapes
  ``models.ColBERT.encode`` returns (``pylate/models/colbert.py``): a list
  of ``[tokens, dim]`` float32 arrays, a list of tensors with
  ``convert_to_tensor=True``, and one ``[tokens, dim]`` for a single string.
- The index calls mirror ``indexes.PLAID`` usage in its docstring
  (``pylate/indexes/plaid.py``): ``index = index.add_documents(
  documents_ids=..., documents_embeddings=...)``, ``index(queries, k=10)``,
  ``remove_documents``; ``subset`` as ``FastPlaid.__call__``
  (``pylate/indexes/fast_plaid.py``) takes it.
- ``PyLateIndex.rerank`` is checked against ``pylate.rank.rerank``'s
  contract (``pylate/rank/rank.py``): every candidate, best first.

Results are checked against the numpy MaxSim reference.
"""

from __future__ import annotations

import unittest
from typing import Any, Dict, List, Optional

import numpy as np

import support  # noqa: I100 - puts the package and its stubs on the path
from support import reference_scores

import maxsimd  # noqa: E402
from maxsimd.pylate import PyLateIndex  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

DIM = 48
NUM_DOCS = 90
QUERY_TOKENS = 32  # PyLate pads queries to query_length (32 by default)
ATOL = 1e-4
SERVER = support.ModuleServer()
setUpModule = SERVER.start  # noqa: N816 - unittest's name
tearDownModule = SERVER.stop  # noqa: N816


def pylate_retrieve(index: Any, queries_embeddings: Any, k: int = 10,
                    k_token: Optional[int] = None,
                    device: Optional[str] = None,
                    batch_size: Optional[int] = None,
                    subset: Any = None) -> List[List[Dict[str, Any]]]:
    """PyLate 1.4.0 ``BaseRetriever.retrieve``, as far as an end-to-end
    index takes it (the token path needs ``index.get_documents_embeddings``
    and per-token hits, which an end-to-end index does not serve)."""
    k_token = 100 if k_token is None else k_token
    batch_size = 50 if batch_size is None else batch_size
    if index.is_end_to_end_index:
        return index(queries_embeddings=queries_embeddings, k=k,
                     subset=subset)
    raise AssertionError("PyLate would take the token path for this index")


def encode_like_pylate(embeddings: List[np.ndarray],
                       convert_to_tensor: bool = False,
                       dtype: Any = None) -> Any:
    """What ``models.ColBERT.encode`` hands back for a list of texts."""
    if not convert_to_tensor:
        return [e.astype(np.float32) for e in embeddings]
    return [torch.from_numpy(e).to(dtype or torch.float32)
            for e in embeddings]


class PyLateIndexTest(unittest.TestCase):

    corpus = "py_pylate"

    @classmethod
    def setUpClass(cls) -> None:
        cls.client = support.set_up_live_class(cls, SERVER.target, NUM_DOCS,
                                               DIM, max_tokens=60)
        # PyLate's examples use string ids ("1", "2", ... or dataset ids).
        cls.ids = [f"doc-{i}" for i in range(NUM_DOCS)]
        cls.by_id = dict(zip(cls.ids, cls.docs))

    def setUp(self) -> None:
        self.index = PyLateIndex(self.client, corpus=self.corpus,
                                 override=True)
        returned = self.index.add_documents(
            documents_ids=self.ids,
            documents_embeddings=encode_like_pylate(self.docs))
        self.assertIs(returned, self.index)

    def queries(self, n: int) -> List[np.ndarray]:
        return [support.near_query(self.rng, self.docs, QUERY_TOKENS,
                                   noise=0.4) for _ in range(n)]

    def assert_ranking(self, got: List[Dict[str, Any]], query: np.ndarray,
                       pool: List[Any], k: int,
                       id_type: type = str) -> None:
        """PyLate's RerankResult shape, best first, equal to the reference
        up to ties."""
        ref = reference_scores(query, [self.by_id[str(i)] if id_type is str
                                       else self.docs[int(i)]
                                       for i in pool])
        want = np.sort(ref)[::-1][:k]
        self.assertEqual(len(got), len(want))
        by_id = dict(zip(pool, ref.tolist()))
        for item in got:
            self.assertEqual(set(item), {"id", "score"})
            self.assertIsInstance(item["id"], id_type)
            self.assertIsInstance(item["score"], float)
            self.assertAlmostEqual(item["score"], by_id[item["id"]],
                                   delta=ATOL)
        np.testing.assert_allclose([item["score"] for item in got], want,
                                   atol=ATOL)
        self.assertEqual(len({item["id"] for item in got}), len(got))

    def test_retriever_over_the_whole_corpus(self) -> None:
        queries = self.queries(5)
        for encoded in (encode_like_pylate(queries),
                        np.stack(queries)):  # [n, tokens, dim] as well
            results = pylate_retrieve(self.index, encoded, k=10)
            self.assertIsInstance(results, list)
            self.assertEqual(len(results), 5)
            for q, r in zip(queries, results):
                self.assert_ranking(r, q, self.ids, 10)

        # One string encodes to one [tokens, dim]: one list of results.
        single = pylate_retrieve(self.index, queries[0], k=3)
        self.assertEqual(len(single), 1)
        self.assert_ranking(single[0], queries[0], self.ids, 3)

        # More queries than one RerankBatch call takes, and k = every
        # document.
        small = PyLateIndex(self.client, corpus=self.corpus, batch_size=2)
        results = pylate_retrieve(small, encode_like_pylate(queries),
                                  k=NUM_DOCS)
        for q, r in zip(queries, results):
            self.assert_ranking(r, q, self.ids, NUM_DOCS)

    @unittest.skipIf(torch is None, "torch is not importable")
    def test_retriever_with_torch_embeddings(self) -> None:
        queries = self.queries(3)
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            encoded = [t.requires_grad_() if dtype == torch.float32 else t
                       for t in encode_like_pylate(queries, True, dtype)]
            exact = [t.detach().double().numpy() for t in encoded]
            results = pylate_retrieve(self.index, encoded, k=8)
            for q, r in zip(exact, results):
                self.assert_ranking(r, q, self.ids, 8)
        # Documents as tensors (convert_to_tensor=True) into a new index.
        other = PyLateIndex(self.client, corpus="py_pylate_torch",
                            override=True)
        other.add_documents(self.ids[:10],
                            encode_like_pylate(self.docs[:10], True,
                                               torch.float16))
        results = pylate_retrieve(other, torch.from_numpy(
            np.stack(queries)), k=4)
        for q, r in zip(queries, results):
            self.assert_ranking(r, q, self.ids[:10], 4)
        self.client.drop_corpus("py_pylate_torch")

    def test_subset(self) -> None:
        queries = self.queries(3)
        shared = [self.ids[i] for i in self.rng.choice(NUM_DOCS, 12,
                                                       replace=False)]
        results = pylate_retrieve(self.index, queries, k=5, subset=shared)
        for q, r in zip(queries, results):
            self.assert_ranking(r, q, shared, 5)
        per_query = [[self.ids[i] for i in self.rng.choice(
            NUM_DOCS, n, replace=False)] for n in (3, 20, 1)]
        results = pylate_retrieve(self.index, queries, k=5, subset=per_query)
        for q, pool, r in zip(queries, per_query, results):
            self.assert_ranking(r, q, pool, 5)
        self.assertEqual(pylate_retrieve(self.index, queries, k=5,
                                         subset=[]), [[], [], []])
        with self.assertRaises(maxsimd.InvalidArgumentError):
            self.index(queries, k=5, subset=per_query[:2])

    def test_remove_documents(self) -> None:
        q = self.queries(1)[0]
        top = pylate_retrieve(self.index, [q], k=5)[0]
        removed = [item["id"] for item in top[:2]]
        # Ids the index does not hold are skipped, as PLAID skips them.
        self.assertIs(self.index.remove_documents(removed + ["no-such"]),
                      self.index)
        after = pylate_retrieve(self.index, [q], k=NUM_DOCS)[0]
        kept = [i for i in self.ids if i not in removed]
        self.assert_ranking(after, q, kept, NUM_DOCS)
        self.assertFalse(set(removed) & {item["id"] for item in after})
        self.assertEqual(self.client.get_corpus(self.corpus).num_documents,
                         NUM_DOCS - 2)

    def test_int_ids_single_documents_and_reopening(self) -> None:
        index = PyLateIndex(SERVER.target, corpus="py_pylate_int",
                            override=True, id_type="int", create_options={
                                "storage_dtype": "float16"})
        try:
            # range ids, as PLAID's docstring adds them, one batch per call.
            index.add_documents(range(20), self.docs[:20], batch_size=7)
            index.add_documents(20, self.docs[20])  # one id, one [L, d]
            index.add_documents(np.int64(21), self.docs[21])
            index.add_documents(np.arange(22, 24), self.docs[22:24])
            q = self.queries(1)[0]
            got = index([q], k=6)[0]
            self.assert_ranking(got, q, list(range(24)), 6, id_type=int)
            # A new index object on the existing corpus, which has added
            # nothing: the configured type, not what some object added.
            reopened = PyLateIndex(self.client, corpus="py_pylate_int",
                                   id_type=int)
            self.assertEqual(reopened([q], k=6)[0], got)
            as_str = PyLateIndex(self.client, corpus="py_pylate_int")
            self.assertEqual(as_str.id_type, "str")
            self.assertEqual([r["id"] for r in as_str([q], k=6)[0]],
                             [str(r["id"]) for r in got])
            with self.assertRaises(NotImplementedError):
                index.get_documents_embeddings([[0, 1]])
        finally:
            self.client.drop_corpus("py_pylate_int")
            index.close()

    def test_mixing_id_types_is_refused(self) -> None:
        # String ids on an int index, and int ids on a str index, are
        # refused before anything is added, naming the id and the type.
        ints = PyLateIndex(self.client, corpus="py_pylate_mixed",
                           override=True, id_type="int")
        try:
            ints.add_documents([1, 2], self.docs[:2])
            with self.assertRaises(maxsimd.InvalidArgumentError) as cm:
                ints.add_documents([3, "doc-4"], self.docs[2:4])
            self.assertIn("documents_ids[1]", str(cm.exception))
            self.assertIn("'doc-4'", str(cm.exception))
            self.assertIn("id_type='int'", str(cm.exception))
            with self.assertRaises(ValueError):
                ints.add_documents(np.array(["5"]), self.docs[4:5])
            self.assertEqual(
                self.client.get_corpus("py_pylate_mixed").num_documents, 2)
        finally:
            self.client.drop_corpus("py_pylate_mixed")
        with self.assertRaises(maxsimd.InvalidArgumentError) as cm:
            self.index.add_documents(["doc-x", 7], self.docs[:2])
        self.assertIn("documents_ids[1] is 7", str(cm.exception))
        self.assertIn("id_type='str'", str(cm.exception))
        with self.assertRaises(ValueError):
            self.index.add_documents(np.arange(2), self.docs[:2])
        self.assertEqual(self.client.get_corpus(self.corpus).num_documents,
                         NUM_DOCS)
        # An int index opened on a corpus of string ids says so when
        # results come back.
        wrong = PyLateIndex(self.client, corpus=self.corpus, id_type="int")
        with self.assertRaisesRegex(maxsimd.InvalidArgumentError,
                                    "id_type='str'"):
            wrong(self.queries(1), k=3)
        with self.assertRaises(ValueError):
            PyLateIndex(self.client, corpus=self.corpus, id_type="float")

    @unittest.skipIf(torch is None, "torch is not importable")
    def test_tensor_ids(self) -> None:
        # A 1-D integer tensor, a list of 0-d tensors (iterating a tensor
        # yields them) and one 0-d tensor: integers, on an int index.
        index = PyLateIndex(self.client, corpus="py_pylate_tensor_ids",
                            override=True, id_type="int")
        try:
            index.add_documents(torch.arange(0, 10), self.docs[:10])
            index.add_documents(list(torch.arange(10, 15)), self.docs[10:15])
            index.add_documents(torch.tensor(15), self.docs[15])
            q = self.queries(1)[0]
            got = index([q], k=16)[0]
            self.assert_ranking(got, q, list(range(16)), 16, id_type=int)
            with self.assertRaises(maxsimd.InvalidArgumentError):
                self.index.add_documents(list(torch.arange(2)),
                                         self.docs[:2])
            # Ids of subset and remove_documents may be tensors too.
            subset = index([q], k=3, subset=torch.arange(4, 8))[0]
            self.assert_ranking(subset, q, list(range(4, 8)), 3,
                                id_type=int)
            index.remove_documents(torch.tensor(0))
            self.assertEqual(self.client.get_corpus(
                "py_pylate_tensor_ids").num_documents, 15)
        finally:
            self.client.drop_corpus("py_pylate_tensor_ids")

    def test_rerank_like_pylate_rank(self) -> None:
        queries = self.queries(3)
        candidates = [[self.ids[i] for i in self.rng.choice(
            NUM_DOCS, n, replace=False)] for n in (15, 4, 30)]
        results = self.index.rerank(
            documents_ids=candidates, queries_embeddings=queries,
            documents_embeddings=None)
        self.assertEqual(len(results), 3)
        for q, pool, r in zip(queries, candidates, results):
            self.assert_ranking(r, q, pool, len(pool))  # all, best first
        with self.assertRaises(maxsimd.NotFoundError):
            self.index.rerank([["no-such"]], [queries[0]])


if __name__ == "__main__":
    unittest.main()
