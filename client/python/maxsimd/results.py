"""Value types of the client: a query to send, a ranked result, its timing.

Document ids are strings on the wire (1 to 256 bytes, as given to
AddDocuments). First-stage retrievers mostly hand out integer ids, so a
``Result`` offers both: ``ids`` as an int64 array (when every id is a decimal
integer) and ``str_ids`` exactly as the server sent them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, List, Optional, Sequence, Union

import numpy as np

# What the client accepts as document ids: a sequence of ints or strings, or a
# 1-D integer or string numpy array.
IdsLike = Union[Sequence[Union[int, str]], np.ndarray]


@dataclass(frozen=True)
class Timing:
    """Where the server spent one request's time, in nanoseconds.

    Mirrors ``maxsimd.v1.Timing``: queue (arrival to batch start), compute
    (batch start to results), total (arrival to response), and within
    compute the host-to-device copies (0 on the CPU backend), the MaxSim
    kernel and the final top-k; ``batch_queries`` is the size of the batch
    the request ran in.
    """

    queue_ns: int = 0
    compute_ns: int = 0
    total_ns: int = 0
    h2d_ns: int = 0
    kernel_ns: int = 0
    topk_ns: int = 0
    batch_queries: int = 0

    @classmethod
    def from_proto(cls, t: Any) -> "Timing":
        return cls(queue_ns=t.queue_ns, compute_ns=t.compute_ns,
                   total_ns=t.total_ns, h2d_ns=t.h2d_ns, kernel_ns=t.kernel_ns,
                   topk_ns=t.topk_ns, batch_queries=t.batch_queries)


# eq=False: numpy arrays have no single truth value to compare with.
@dataclass(frozen=True, eq=False)
class Result:
    """The top documents of one query, best first.

    Equal scores keep the server's order: the order in which the documents
    were added (``ShardedClient`` documents its own rule for its merge).

    Attributes:
        str_ids: the document ids as the server sent them.
        scores: float32 MaxSim scores, same order, non-increasing.
        timing: the server's time breakdown (for a sharded result, the
            slowest shard's).
        request_id: the request's tag, echoed by the server.
    """

    str_ids: List[str]
    scores: np.ndarray
    timing: Optional[Timing] = None
    request_id: str = ""

    @cached_property
    def ids(self) -> np.ndarray:
        """The ids as an int64 array; ValueError if one is not an integer."""
        out = np.empty(len(self.str_ids), dtype=np.int64)
        for i, s in enumerate(self.str_ids):
            try:
                out[i] = int(s)
            except (ValueError, OverflowError):
                raise ValueError(
                    f"document id {s!r} is not an int64; use Result.str_ids "
                    "for corpora with string ids") from None
        return out

    def __len__(self) -> int:
        return len(self.str_ids)

    def to_dicts(self) -> List[dict]:
        """PyLate's shape: ``[{"id": ..., "score": ...}, ...]``, best first.

        Ids are ints when every id is an integer, else strings.
        """
        try:
            ids: Sequence[Union[int, str]] = self.ids.tolist()
        except ValueError:
            ids = self.str_ids
        return [{"id": i, "score": float(s)} for i, s in zip(ids, self.scores)]

    @classmethod
    def from_proto(cls, response: Any) -> "Result":
        docs = response.results
        return cls(str_ids=[d.id for d in docs],
                   scores=np.fromiter((d.score for d in docs),
                                      dtype=np.float32, count=len(docs)),
                   timing=Timing.from_proto(response.timing)
                   if response.HasField("timing") else None,
                   request_id=response.request_id)


@dataclass
class Query:
    """One query for ``rerank_stream`` (and ``Client.to_request``).

    Attributes:
        corpus: corpus name or alias.
        query: token embeddings ``[Lq, d]``, float32 or float16 (anything
            ``np.asarray`` accepts).
        candidates: document ids to rank; None ranks the whole corpus.
        top_k: documents to return.
        request_id: caller's tag; ``rerank_stream`` assigns the query's index
            (as a string) when empty.
        priority: queue priority within the corpus, -100..100.
    """

    corpus: str
    query: Any
    candidates: Optional[IdsLike] = None
    top_k: int = 10
    request_id: str = ""
    priority: int = 0
