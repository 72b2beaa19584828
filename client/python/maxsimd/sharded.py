"""``ShardedClient``: one logical corpus split over several maxsimd hosts.

For a corpus larger than one host, each shard endpoint holds a disjoint part
of the documents. A query fans out to every shard at once (a thread pool of
blocking calls, each with the client's retries), each shard returns its own
top-k, and the client merges them: MaxSim scores a document independently
of every other, so the merged top-k of the shards' top-k lists is exactly the
top-k of the whole corpus.

Replicas of one shard are not listed here: give the shard's target as a name
that resolves to all of them (``dns:///maxsimd-shard-0.maxsimd:50051``) and
gRPC's round_robin policy (the Client's default) spreads calls over them.

Document placement: ``add_documents`` and ``delete_documents`` route each id
to ``shard_of(id)``, by default ``crc32(id) % len(targets)`` (stable across
processes, unlike Python's ``hash``). A rerank with candidates sends each
shard only the ids it holds, since a shard answers NOT_FOUND for an id it
does not hold. Corpora loaded some other way need a matching ``shard_of``.

Thread-safety: like Client, a ShardedClient may be shared by many threads.
"""

from __future__ import annotations

import zlib
from functools import partial
from concurrent.futures import (FIRST_EXCEPTION, Future, ThreadPoolExecutor,
                                wait)
from typing import Any, Callable, List, Optional, Sequence, TypeVar

import numpy as np
import numpy.typing as npt

from maxsimd._calls import document_rows
from maxsimd._encode import id_strings
from maxsimd.client import Client
from maxsimd.errors import invalid_argument
from maxsimd.results import CorpusInfo, IdsLike, Result

T = TypeVar("T")


def merge_results(results: Sequence[Result], top_k: int) -> Result:
    """Merges the shards' rankings of one query into the best ``top_k``.

    Order: score descending; equal scores go to the lower shard index (the
    order of ``targets``), then keep that shard's own order (the order in
    which its documents were added). The rule is deterministic, so a
    repeated query returns the same ranking; it matches a single server
    holding every document when the documents were added shard by shard in
    the order of ``targets``.

    The merged timing is that of the slowest shard (by ``total_ns``), which
    bounds the query's latency.
    """
    ids: List[str] = []
    scores: List[npt.NDArray[np.float32]] = []
    shard: List[npt.NDArray[np.int64]] = []
    rank: List[npt.NDArray[np.int64]] = []
    for s, r in enumerate(results):
        ids.extend(r.str_ids)
        scores.append(np.asarray(r.scores, dtype=np.float32))
        shard.append(np.full(len(r), s, dtype=np.int64))
        rank.append(np.arange(len(r), dtype=np.int64))
    if not ids:
        merged_scores = np.empty(0, dtype=np.float32)
        order = np.empty(0, dtype=np.int64)
    else:
        merged_scores = np.concatenate(scores)
        # lexsort sorts by the last key first.
        keys: List[npt.NDArray[Any]] = [np.concatenate(rank),
                                        np.concatenate(shard),
                                        -merged_scores]
        order = np.lexsort(keys)[:top_k]
    timings = [r.timing for r in results if r.timing is not None]
    slowest = max(timings, key=lambda t: t.total_ns) if timings else None
    return Result(str_ids=[ids[i] for i in order],
                  scores=merged_scores[order],
                  timing=slowest,
                  request_id=results[0].request_id if results else "")


def crc32_shard(doc_id: str, num_shards: int) -> int:
    """The default placement: crc32 of the id's UTF-8 bytes, mod shards."""
    return zlib.crc32(doc_id.encode("utf-8")) % num_shards


class ShardedClient:
    """Scatter-gather over shard endpoints that each hold part of a corpus.

    Args:
        targets: one gRPC target per shard (each may name several replicas).
        shard_of: ``(id, num_shards) -> shard index`` for document placement;
            default ``crc32_shard``.
        max_workers: threads of the fan-out pool (default 2 per shard, so two
            queries can be in flight on every shard at once).
        **client_options: passed to every shard's ``Client`` (tls, token,
            default_timeout, retries, ...).
    """

    def __init__(self, targets: Sequence[str], *,
                 shard_of: Optional[Callable[[str, int], int]] = None,
                 max_workers: Optional[int] = None,
                 **client_options: Any) -> None:
        if not targets:
            raise ValueError("ShardedClient needs at least one target")
        self.clients = [Client(t, **client_options) for t in targets]
        self._shard_of = shard_of or crc32_shard
        self._pool = ThreadPoolExecutor(
            max_workers=max_workers or 2 * len(targets),
            thread_name_prefix="maxsimd-shard")

    @property
    def num_shards(self) -> int:
        return len(self.clients)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for c in self.clients:
            c.close()

    def __enter__(self) -> "ShardedClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------

    def shard_of(self, doc_id: Any) -> int:
        """The shard that holds (or will hold) document ``doc_id``."""
        s = id_strings([doc_id], "doc_id")[0]
        shard = self._shard_of(s, self.num_shards)
        if not 0 <= shard < self.num_shards:
            raise ValueError(f"shard_of({s!r}) is {shard}; need 0.."
                             f"{self.num_shards - 1}")
        return shard

    def partition(self, ids: IdsLike) -> List[List[str]]:
        """Splits ids by shard, keeping their order within each shard."""
        parts: List[List[str]] = [[] for _ in self.clients]
        for s in id_strings(ids, "ids"):
            parts[self._shard_of(s, self.num_shards)].append(s)
        return parts

    def _fan_out(self, calls: Sequence[Callable[[], T]]) -> List[T]:
        """Runs the calls (one per shard) concurrently; results in order.

        The first failure is raised as soon as it happens (the others are
        left to finish in the pool: a blocking gRPC call cannot be taken
        back), with the lowest shard index winning among failures seen
        together.
        """
        futures: List[Future[T]] = [self._pool.submit(fn) for fn in calls]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            if f in done and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
        return [f.result() for f in futures]

    # ------------------------------------------------------------------
    # Queries

    def rerank(self, corpus: str, query: Any,
               candidates: Optional[IdsLike] = None, *, top_k: int = 10,
               request_id: str = "", priority: int = 0,
               timeout: Optional[float] = None) -> Result:
        """``Client.rerank`` over every shard, merged by ``merge_results``.

        A scan (candidates None) runs on every shard; a rerank sends each
        shard its own candidates and skips shards that hold none.
        """
        if candidates is None:
            parts: List[Optional[List[str]]] = [None] * self.num_shards
        else:
            parts = list(self.partition(candidates))
        calls = [lambda c=c, p=p: c.rerank(
                     corpus, query, p, top_k=top_k, request_id=request_id,
                     priority=priority, timeout=timeout)
                 for c, p in zip(self.clients, parts) if p is None or p]
        return merge_results(self._fan_out(calls), top_k)

    def rerank_batch(self, corpus: str, queries: Sequence[Any],
                     candidates: Optional[Sequence[Optional[IdsLike]]] = None,
                     *, top_k: int = 10,
                     timeout: Optional[float] = None) -> List[Result]:
        """``Client.rerank_batch`` on every shard, merged query by query."""
        n = len(queries)
        if candidates is not None and len(candidates) != n:
            raise invalid_argument(
                f"candidates has {len(candidates)} entries for {n} queries")
        per_shard: List[Optional[List[Optional[List[str]]]]] = []
        if candidates is None:
            per_shard = [None] * self.num_shards
        else:
            split = [None if c is None else self.partition(c)
                     for c in candidates]
            per_shard = [[None if p is None else p[s] for p in split]
                         for s in range(self.num_shards)]
        calls = [lambda c=c, p=p: c.rerank_batch(
                     corpus, queries, p, top_k=top_k, timeout=timeout)
                 for c, p in zip(self.clients, per_shard)]
        shard_results = self._fan_out(calls)
        return [merge_results([r[i] for r in shard_results], top_k)
                for i in range(n)]

    # ------------------------------------------------------------------
    # Admin, applied to every shard (or routed by id)

    def create_corpus(self, name: str, dim: int,
                      **kwargs: Any) -> List[CorpusInfo]:
        """Creates the corpus on every shard; one CorpusInfo per shard."""
        return self._fan_out([partial(c.create_corpus, name, dim, **kwargs)
                              for c in self.clients])

    def drop_corpus(self, name: str, **kwargs: Any) -> None:
        self._fan_out([partial(c.drop_corpus, name, **kwargs)
                       for c in self.clients])

    def get_corpus(self, name: str, **kwargs: Any) -> List[CorpusInfo]:
        """One CorpusInfo per shard (sum num_documents for the total)."""
        return self._fan_out([partial(c.get_corpus, name, **kwargs)
                              for c in self.clients])

    def set_alias(self, alias: str, corpus: str, **kwargs: Any) -> None:
        """Points the alias on every shard. Each shard switches atomically,
        but not all at the same instant: for a moment a query may see the
        old corpus on some shards and the new one on others."""
        self._fan_out([partial(c.set_alias, alias, corpus, **kwargs)
                       for c in self.clients])

    def delete_alias(self, alias: str, **kwargs: Any) -> None:
        self._fan_out([partial(c.delete_alias, alias, **kwargs)
                       for c in self.clients])

    def add_documents(self, corpus: str, ids: IdsLike, docs: Any = None, *,
                      tokens: Any = None, cu_seqlens: Any = None,
                      send_dtype: Optional[str] = None,
                      **kwargs: Any) -> int:
        """Routes each document to ``shard_of(id)``; returns the number added.

        Takes the documents in every form ``Client.add_documents`` takes
        (arrays or tensors of any supported dtype, on any device, requiring
        grad or not). They are checked and converted once, here, before any
        shard is called, then split by shard; 16-bit input still travels as
        16 bits unless ``send_dtype`` (or the clients' own) says otherwise.

        Each shard commits its part atomically, but the shards commit
        independently: if one fails, the others may have added theirs
        (retrying the failed shard's part alone is safe).
        """
        id_list = id_strings(ids, "ids")
        rows, counts, _, natural = document_rows(docs, tokens, cu_seqlens)
        if len(counts) != len(id_list):
            raise invalid_argument(
                f"{len(id_list)} ids for {len(counts)} documents")
        send_dtype = send_dtype or self.clients[0].send_dtype or natural
        shard_ids: List[List[str]] = [[] for _ in self.clients]
        shard_docs: List[List[Any]] = [[] for _ in self.clients]
        for i, doc_id in enumerate(id_list):
            s = self._shard_of(doc_id, self.num_shards)
            shard_ids[s].append(doc_id)
            shard_docs[s].append(rows(i, i + 1))
        calls = [lambda c=c, i=i, d=d: c.add_documents(
                     corpus, i, d, send_dtype=send_dtype, **kwargs)
                 for c, i, d in zip(self.clients, shard_ids, shard_docs) if i]
        return sum(r.added for r in self._fan_out(calls))

    def delete_documents(self, corpus: str, ids: IdsLike, *,
                         ignore_missing: bool = False, **kwargs: Any) -> int:
        """Routes each id to its shard; returns the number deleted."""
        calls = [lambda c=c, p=p: c.delete_documents(
                     corpus, p, ignore_missing=ignore_missing, **kwargs)
                 for c, p in zip(self.clients, self.partition(ids)) if p]
        return sum(r.deleted for r in self._fan_out(calls))
