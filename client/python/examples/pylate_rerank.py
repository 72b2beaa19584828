#!/usr/bin/env python3
"""Replacing in-process MaxSim reranking with maxsimd, in a PyLate-style
pipeline: query embeddings -> first-stage candidate ids -> MaxSim rerank.

Before, the second stage keeps every document's token embeddings in the
Python process and scores the candidates itself (PyLate's
``rank.rerank(documents_ids, queries_embeddings, documents_embeddings)``,
colpali-engine's ``processor.score_multi_vector(qs, ps)``); ``maxsim_rerank``
below is that step in numpy. After, the embeddings live in the maxsimd server
(on a machine with an NVIDIA GPU, in GPU memory) and the pipeline sends only
the query and the candidate ids: ``client.rerank(corpus, query, candidates)``.

The embeddings here are synthetic (unit-norm, ColBERT-like: d = 128, 32
query tokens, 20-120 tokens per document), so the example needs only numpy
and the maxsimd package. It checks that both rankings agree and exits
non-zero if they do not.

It imports the installed ``maxsimd`` package (client/python/README.md,
"Install"):

    python3 client/python/examples/pylate_rerank.py --target 127.0.0.1:50051
    python3 client/python/examples/pylate_rerank.py \
        --spawn build/server/maxsimd

From a checkout without installing, put the package on the path yourself:
``PYTHONPATH=client/python`` (with the stubs built in place, or
``MAXSIMD_STUBS_DIR`` set).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from typing import Dict, List, Sequence, Union

import numpy as np

import maxsimd

Ranking = List[Dict[str, Union[int, float]]]


# --- Before: MaxSim in the pipeline's own process ---------------------------

def maxsim_rerank(candidate_ids: Sequence[int], query: np.ndarray,
                  doc_embeddings: Dict[int, np.ndarray]) -> Ranking:
    """The in-process step maxsimd replaces: score every candidate's tokens
    against the query and sort (PyLate's rank.rerank, for one query).

    score(q, d) = sum over query tokens of max over document tokens of <q, d>
    """
    scores = np.array([
        (query @ doc_embeddings[i].T).max(axis=1).sum() for i in candidate_ids
    ], dtype=np.float32)
    order = np.argsort(-scores, kind="stable")
    return [{"id": int(candidate_ids[i]), "score": float(scores[i])}
            for i in order]


# --- After: the same step as one call to maxsimd -----------------------------

def maxsimd_rerank(client: maxsimd.Client, corpus: str,
                   candidate_ids: Sequence[int], query: np.ndarray,
                   top_k: int) -> Ranking:
    """The drop-in replacement: same inputs (minus the document embeddings,
    which the server holds), same output shape."""
    return client.rerank(corpus, query, candidate_ids, top_k=top_k).to_dicts()


# --- A synthetic corpus and first stage --------------------------------------

def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def make_corpus(rng: np.random.Generator, num_docs: int, dim: int
                ) -> Dict[int, np.ndarray]:
    """Documents as fp16, as a ColBERT index would store them."""
    lengths = rng.integers(20, 121, size=num_docs)
    return {1000 + i: unit(rng.standard_normal((int(n), dim)))
            .astype(np.float16) for i, n in enumerate(lengths)}


def make_query(rng: np.random.Generator, doc: np.ndarray,
               tokens: int = 32) -> np.ndarray:
    """A query near one document: some of its tokens plus noise."""
    rows = rng.integers(0, len(doc), size=tokens)
    return unit(doc[rows].astype(np.float32)
                + 0.3 * rng.standard_normal((tokens, doc.shape[1])))


def first_stage(query: np.ndarray, pooled: np.ndarray, ids: np.ndarray,
                k: int) -> np.ndarray:
    """A cheap candidate generator (mean-pooled embeddings), standing in for
    PLAID, an HNSW index or BM25."""
    return ids[np.argsort(-(pooled @ query.mean(axis=0)))[:k]]


# --- Running it --------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="127.0.0.1:50051",
                        help="a running maxsimd server")
    parser.add_argument("--spawn", metavar="SERVER_BIN",
                        help="start this server binary on a free port (CPU "
                             "backend) instead of using --target")
    parser.add_argument("--corpus", default="pylate_example")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=8)
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    server = None
    if args.spawn:
        args.target = f"127.0.0.1:{free_port()}"
        server = subprocess.Popen(
            [args.spawn, f"--listen={args.target}", "--metrics_listen=",
             "--cpu", "--log_level=warn"])
    try:
        return run(args)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)


def run(args: argparse.Namespace) -> int:
    rng = np.random.default_rng(args.seed)
    dim = 128
    docs = make_corpus(rng, args.docs, dim)
    ids = np.fromiter(docs, dtype=np.int64)
    pooled = unit(np.stack([d.astype(np.float32).mean(axis=0)
                            for d in docs.values()]))

    with maxsimd.Client(args.target) as client:
        client.wait_until_serving(timeout=30)
        # One-time load: the documents move from the pipeline to the server.
        try:
            client.drop_corpus(args.corpus)
        except maxsimd.NotFoundError:
            pass
        client.create_corpus(args.corpus, dim, storage_dtype="float16")
        t0 = time.perf_counter()
        added = client.add_documents(args.corpus, ids, list(docs.values()),
                                     timeout=120).added
        print(f"loaded {added} documents into {args.corpus!r} on "
              f"{args.target} in {time.perf_counter() - t0:.2f} s")

        worst = 0.0
        mismatches = 0
        t_before = t_after = 0.0
        for qi in range(args.queries):
            source = int(rng.choice(ids))
            query = make_query(rng, docs[source])
            candidates = first_stage(query, pooled, ids, args.candidates)

            t0 = time.perf_counter()
            before = maxsim_rerank(candidates, query, docs)[:args.top_k]
            t1 = time.perf_counter()
            after = maxsimd_rerank(client, args.corpus, candidates, query,
                                   args.top_k)
            t2 = time.perf_counter()
            t_before += t1 - t0
            t_after += t2 - t1

            # Tie-tolerant comparison: the same score at every rank, and
            # every returned id scored the same by both (equal scores may
            # come in either order).
            ref = {r["id"]: r["score"] for r in before}
            diff = max([abs(a["score"] - b["score"])
                        for a, b in zip(before, after)]
                       + [abs(ref.get(b["id"], np.inf) - b["score"])
                          for b in after])
            worst = max(worst, diff)
            if len(after) != len(before) or diff >= 1e-3:
                mismatches += 1
            print(f"query {qi}: top-3 before {[r['id'] for r in before[:3]]} "
                  f"after {[r['id'] for r in after[:3]]} "
                  f"(source {source}, rank-1 score {after[0]['score']:.4f})")

        client.drop_corpus(args.corpus)
    ok = mismatches == 0
    print(f"{args.queries} queries x {args.candidates} candidates: numpy "
          f"{1e3 * t_before / args.queries:.2f} ms/query, maxsimd "
          f"{1e3 * t_after / args.queries:.2f} ms/query (round trip); "
          f"largest score difference {worst:.2e}")
    print("rankings match" if ok else "RANKINGS DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
