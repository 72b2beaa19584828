"""Inputs of the Python client (client/python/maxsimd/_encode.py): numpy
arrays of every accepted dtype (ml_dtypes' where it is installed), torch
tensors (float16, bfloat16, float32, float64, float8 where the installed
torch has it; requiring grad; on any device, copied before they are
widened), refused dtypes, and ids as lists, numpy arrays or torch tensors.

The encoding is checked byte for byte against the wire format, then every
Client path that takes embeddings or ids is driven with them against a live
server and checked against the numpy MaxSim reference. The torch parts skip
only where torch cannot be imported; the CUDA case runs on a machine with
an NVIDIA GPU.
"""

from __future__ import annotations

import unittest
from typing import Any, List

import numpy as np

import support  # noqa: I100 - puts the package and its stubs on the path
from support import SEED, reference_scores

import maxsimd  # noqa: E402
from maxsimd._encode import (encode_tensor, id_strings,  # noqa: E402
                             is_torch_tensor, to_bfloat16_bits, to_numpy)
from maxsimd._pb import types_pb2  # noqa: E402

try:
    import torch
except ImportError:  # the torch cases skip; everything else runs
    torch = None

try:
    import ml_dtypes
except ImportError:  # the ml_dtypes case skips
    ml_dtypes = None

needs_torch = unittest.skipIf(torch is None, "torch is not importable")

DIM = 32
NUM_DOCS = 60
ATOL = 1e-4
SERVER = support.ModuleServer()
setUpModule = SERVER.start  # noqa: N816 - unittest's name
tearDownModule = SERVER.stop  # noqa: N816


def decode(tensor: Any) -> np.ndarray:
    """A wire Tensor back to float64, whatever its dtype."""
    shape = tuple(tensor.shape)
    if tensor.dtype == types_pb2.DTYPE_FLOAT32:
        a = np.frombuffer(tensor.data, dtype="<f4")
    elif tensor.dtype == types_pb2.DTYPE_FLOAT16:
        a = np.frombuffer(tensor.data, dtype="<f2")
    elif tensor.dtype == types_pb2.DTYPE_BFLOAT16:
        bits = np.frombuffer(tensor.data, dtype="<u2").astype(np.uint32)
        a = (bits << 16).view(np.float32)
    else:
        raise AssertionError(f"dtype {tensor.dtype}")
    return a.astype(np.float64).reshape(shape)


class EncodeTest(unittest.TestCase):
    """Conversions, without a server."""

    def setUp(self) -> None:
        self.rng = np.random.default_rng(SEED)
        self.x = self.rng.standard_normal((5, 8)).astype(np.float32)

    def test_numpy_float_dtypes(self) -> None:
        cases = [(np.float64, types_pb2.DTYPE_FLOAT32),
                 (np.float32, types_pb2.DTYPE_FLOAT32),
                 (np.float16, types_pb2.DTYPE_FLOAT16),
                 (np.int32, types_pb2.DTYPE_FLOAT32)]
        for dtype, wire in cases:
            a = self.x.astype(dtype)
            t = encode_tensor(a, "q")
            self.assertEqual(t.dtype, wire, dtype)
            self.assertEqual(list(t.shape), [5, 8])
            np.testing.assert_array_equal(decode(t),
                                          a.astype(np.float64)
                                          if wire != types_pb2.DTYPE_FLOAT32
                                          else a.astype(np.float32))
        # A non-contiguous view is copied in row-major order.
        wide = self.rng.standard_normal((8, 5)).astype(np.float32)
        np.testing.assert_array_equal(decode(encode_tensor(wide.T, "q")),
                                      wide.T)
        for bad in (np.ones((2, 3), bool), np.ones((2, 3), complex),
                    np.array([["a", "b"]])):
            with self.assertRaises(maxsimd.InvalidArgumentError):
                encode_tensor(bad, "q")
        with self.assertRaises(maxsimd.InvalidArgumentError):
            encode_tensor(np.ones(3, np.float32), "q")
        # A dtype numpy cannot widen (raw bytes, as an unknown extension
        # type looks) is refused, named.
        with self.assertRaisesRegex(maxsimd.InvalidArgumentError, "V4"):
            encode_tensor(np.zeros((2, 3), "V4"), "q")

    @unittest.skipIf(ml_dtypes is None, "ml_dtypes is not importable")
    def test_ml_dtypes(self) -> None:
        # bfloat16 and the float8 types travel as bfloat16, exactly.
        for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                      ml_dtypes.float8_e5m2):
            a = self.x.astype(dtype)
            t = encode_tensor(a, "q")
            self.assertEqual(t.dtype, types_pb2.DTYPE_BFLOAT16, dtype)
            np.testing.assert_array_equal(decode(t), a.astype(np.float64))
        with self.assertRaises(maxsimd.InvalidArgumentError):
            encode_tensor(self.x.astype(ml_dtypes.int4), "q")

    def test_send_dtype(self) -> None:
        t = encode_tensor(self.x, "q", "bfloat16")
        self.assertEqual(t.dtype, types_pb2.DTYPE_BFLOAT16)
        self.assertEqual(np.frombuffer(t.data, "<u2").tolist(),
                         to_bfloat16_bits(self.x).ravel().tolist())
        t = encode_tensor(self.x.astype(np.float16), "q", "float32")
        self.assertEqual(t.dtype, types_pb2.DTYPE_FLOAT32)
        with self.assertRaises(maxsimd.InvalidArgumentError):
            encode_tensor(self.x, "q", "int8")
        with self.assertRaises(maxsimd.InvalidArgumentError):
            maxsimd.Client("127.0.0.1:1", send_dtype="float64")

    def test_ids(self) -> None:
        want = ["3", "17", "42"]
        self.assertEqual(id_strings([3, 17, 42]), want)
        self.assertEqual(id_strings(np.array([3, 17, 42], np.uint32)), want)
        self.assertEqual(id_strings(np.array([3, 17, 42], np.int64)), want)
        self.assertEqual(id_strings(np.array(want)), want)
        self.assertEqual(id_strings(np.array(want, dtype=object)), want)
        self.assertEqual(id_strings(np.array([b"3", b"17", b"42"])), want)
        self.assertEqual(id_strings(["a", 7, np.int16(9)]), ["a", "7", "9"])
        for bad in ([1.5], [True], np.array([1.0, 2.0]), np.array([[1, 2]]),
                    "abc", [None]):
            with self.assertRaises(maxsimd.InvalidArgumentError, msg=bad):
                id_strings(bad)

    def test_to_numpy_without_torch_types(self) -> None:
        self.assertFalse(is_torch_tensor(self.x))
        a, natural = to_numpy([[1.0, 2.0], [3.0, 4.0]], "q")
        self.assertEqual(a.shape, (2, 2))
        self.assertIsNone(natural)
        self.assertEqual(to_numpy(self.x.astype(np.float16), "q")[1],
                         "float16")

    @needs_torch
    def test_torch_dtypes(self) -> None:
        t32 = torch.from_numpy(self.x)
        cases = [(torch.float64, types_pb2.DTYPE_FLOAT32),
                 (torch.float32, types_pb2.DTYPE_FLOAT32),
                 (torch.float16, types_pb2.DTYPE_FLOAT16),
                 (torch.bfloat16, types_pb2.DTYPE_BFLOAT16)]
        for dtype, wire in cases:
            t = t32.to(dtype)
            self.assertTrue(is_torch_tensor(t))
            encoded = encode_tensor(t, "q")
            self.assertEqual(encoded.dtype, wire, dtype)
            # The values the tensor holds, exactly (bfloat16 and float16
            # travel as they are, not widened or rounded twice).
            np.testing.assert_array_equal(decode(encoded),
                                          t.double().numpy(), str(dtype))
        # bfloat16 bits on the wire are torch's own bits.
        bf = t32.to(torch.bfloat16)
        encoded = encode_tensor(bf, "q")
        self.assertEqual(np.frombuffer(encoded.data, "<u2").tolist(),
                         bf.view(torch.int16).numpy().view(np.uint16)
                         .ravel().tolist())
        with self.assertRaises(maxsimd.InvalidArgumentError):
            encode_tensor(torch.ones(2, 3, dtype=torch.bool), "q")
        with self.assertRaises(maxsimd.InvalidArgumentError):
            encode_tensor(torch.ones(2, 3, dtype=torch.complex64), "q")
        # float8 (torch 2.1 and later): widened on the CPU, sent as
        # bfloat16, which holds every float8 value.
        for name in ("float8_e4m3fn", "float8_e5m2"):
            dtype = getattr(torch, name, None)
            if dtype is None:
                continue
            t = t32.to(dtype)
            encoded = encode_tensor(t, "q")
            self.assertEqual(encoded.dtype, types_pb2.DTYPE_BFLOAT16, name)
            np.testing.assert_array_equal(decode(encoded),
                                          t.double().numpy(), name)

    @needs_torch
    def test_torch_grad_views_and_parameters(self) -> None:
        leaf = torch.from_numpy(self.x.copy()).requires_grad_()
        np.testing.assert_array_equal(decode(encode_tensor(leaf * 2, "q")),
                                      self.x * 2)
        param = torch.nn.Parameter(torch.from_numpy(self.x.copy()))
        np.testing.assert_array_equal(decode(encode_tensor(param, "q")),
                                      self.x)
        np.testing.assert_array_equal(
            decode(encode_tensor(leaf.t().contiguous().t(), "q")), self.x)
        np.testing.assert_array_equal(decode(encode_tensor(leaf.T, "q")),
                                      self.x.T)

    @needs_torch
    def test_torch_tensors_leave_their_device(self) -> None:
        # A tensor on another device is copied to the CPU through its own
        # .cpu(); a subclass records the calls (a GPU is not needed for it).
        calls: List[str] = []

        class Remote(torch.Tensor):
            def cpu(self, *args: Any, **kwargs: Any) -> Any:
                calls.append("cpu")
                return super().cpu(*args, **kwargs)

            def float(self, *args: Any, **kwargs: Any) -> Any:
                calls.append("float")
                return super().float(*args, **kwargs)

        remote = torch.from_numpy(self.x).as_subclass(Remote)
        np.testing.assert_array_equal(decode(encode_tensor(remote, "q")),
                                      self.x)
        self.assertEqual(calls, ["cpu"])
        # bfloat16 leaves the device as bfloat16 (half the bytes of
        # float32) and is widened on the CPU, not before.
        calls.clear()
        bf = torch.from_numpy(self.x).bfloat16().as_subclass(Remote)
        encoded = encode_tensor(bf, "q")
        self.assertEqual(calls, ["cpu", "float"])
        self.assertEqual(encoded.dtype, types_pb2.DTYPE_BFLOAT16)
        if torch.cuda.is_available():
            on_gpu = torch.from_numpy(self.x).cuda().requires_grad_()
            np.testing.assert_array_equal(
                decode(encode_tensor(on_gpu, "q")), self.x)

    @needs_torch
    def test_torch_ids(self) -> None:
        want = ["3", "17", "42"]
        for dtype in (torch.int64, torch.int32, torch.int16, torch.uint8):
            self.assertEqual(id_strings(torch.tensor([3, 17, 42],
                                                     dtype=dtype)), want)
        # Iterating a tensor yields 0-d tensors.
        self.assertEqual(id_strings(list(torch.tensor([3, 17, 42]))), want)
        for bad in (torch.tensor([1.0]), torch.tensor([True]),
                    torch.tensor([[1, 2]]), [torch.tensor(1.5)]):
            with self.assertRaises(maxsimd.InvalidArgumentError, msg=bad):
                id_strings(bad)


class LiveInputTest(unittest.TestCase):
    """Every Client path with numpy and torch inputs, against the server."""

    corpus = "py_inputs"

    @classmethod
    def setUpClass(cls) -> None:
        cls.client = support.set_up_live_class(cls, SERVER.target, NUM_DOCS,
                                               DIM, first_id=500)
        cls.client.create_corpus(cls.corpus, DIM)
        cls.client.add_documents(cls.corpus, cls.ids, cls.docs)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.drop_corpus(cls.corpus)

    def query(self) -> np.ndarray:
        return support.near_query(self.rng, self.docs, 6)

    def check(self, result: maxsimd.Result, query: np.ndarray,
              candidates: Any, top_k: int, atol: float = ATOL) -> None:
        """Scores equal the reference at every rank; ids score as ranked."""
        pool = self.ids if candidates is None else np.asarray(candidates)
        index = {int(i): k for k, i in enumerate(self.ids)}
        ref = reference_scores(query, [self.docs[index[int(i)]]
                                       for i in pool])
        want = np.sort(ref)[::-1][:top_k]
        self.assertEqual(len(result), len(want))
        np.testing.assert_allclose(result.scores, want, atol=atol)
        by_id = dict(zip(pool.tolist(), ref.tolist()))
        for doc_id, score in zip(result.ids.tolist(), result.scores):
            self.assertAlmostEqual(by_id[doc_id], float(score), delta=atol)

    def test_numpy_dtypes(self) -> None:
        q = self.query()
        for dtype in (np.float64, np.float32):
            self.check(self.client.rerank(self.corpus, q.astype(dtype),
                                          top_k=7), q, None, 7)
        half = q.astype(np.float16)
        self.check(self.client.rerank(self.corpus, half, top_k=7),
                   half.astype(np.float64), None, 7)

    @needs_torch
    def test_torch_queries_and_candidates(self) -> None:
        q = self.query()
        candidates = self.rng.choice(self.ids, 25, replace=False)
        t = torch.from_numpy(q)
        for dtype in (torch.float64, torch.float32, torch.float16,
                      torch.bfloat16):
            tq = t.to(dtype).requires_grad_()
            exact = tq.detach().double().numpy()  # what the server sees
            for ids in (torch.from_numpy(candidates), candidates,
                        candidates.tolist()):
                result = self.client.rerank(self.corpus, tq * 1, ids,
                                            top_k=10)
                self.check(result, exact, candidates, 10)

    @needs_torch
    def test_torch_batch_as_one_tensor(self) -> None:
        qs = np.stack([self.query() for _ in range(3)])
        cands = [None, torch.tensor(self.ids[:20]), []]
        for dtype in (torch.float32, torch.bfloat16):
            batch = torch.from_numpy(qs).to(dtype).requires_grad_()
            exact = batch.detach().double().numpy()
            results = self.client.rerank_batch(self.corpus, batch, cands,
                                               top_k=5)
            self.check(results[0], exact[0], None, 5)
            self.check(results[1], exact[1], self.ids[:20], 5)
            self.assertEqual(len(results[2]), 0)
        with self.assertRaises(maxsimd.InvalidArgumentError):
            self.client.rerank_batch(self.corpus, torch.ones(2, DIM))

    @needs_torch
    def test_torch_documents(self) -> None:
        # The same documents three ways: a list of tensors of mixed float
        # dtypes, one [N, L, d] tensor, ragged tokens with cu_seqlens.
        docs = [torch.from_numpy(d) for d in self.docs[:4]]
        mixed = [docs[0].double(), docs[1].half(), docs[2].bfloat16(),
                 docs[3].requires_grad_()]
        stored = [m.detach().double().numpy() for m in mixed]
        square = torch.from_numpy(np.stack([d[:1] for d in self.docs[:4]]))
        tokens = torch.cat(docs)
        cu = torch.tensor([0] + np.cumsum([len(d) for d in docs]).tolist())
        q = self.query()
        for name, ids, kwargs, want in (
                ("mixed", [1, 2, 3, 4], dict(docs=mixed), stored),
                ("square", np.array([1, 2, 3, 4]), dict(docs=square),
                 [s.numpy() for s in square]),
                ("ragged", torch.arange(1, 5),
                 dict(tokens=tokens, cu_seqlens=cu), self.docs[:4]),
                ("tuple", ["1", "2", "3", "4"], dict(docs=(tokens, cu)),
                 self.docs[:4])):
            corpus = f"py_inputs_{name}"
            self.client.create_corpus(corpus, DIM)
            try:
                added = self.client.add_documents(corpus, ids, **kwargs)
                self.assertEqual(added.added, 4, name)
                self.assertEqual(added.corpus.num_tokens,
                                 sum(len(w) for w in want), name)
                result = self.client.rerank(corpus, q, top_k=4)
                ref = reference_scores(q, want)
                np.testing.assert_allclose(
                    result.scores, np.sort(ref)[::-1], atol=ATOL,
                    err_msg=name)
                self.assertEqual(result.ids.tolist(),
                                 (np.argsort(-ref, kind="stable") + 1)
                                 .tolist(), name)
            finally:
                self.client.drop_corpus(corpus)


if __name__ == "__main__":
    unittest.main()
