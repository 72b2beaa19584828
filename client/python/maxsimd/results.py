"""Value types of the client: a query to send, a ranked result, its timing,
and the typed answers of the admin calls (``CorpusInfo``, ``AddResult``,
``DeleteResult``).

Document ids are strings on the wire (1 to 256 bytes, as given to
AddDocuments). First-stage retrievers mostly hand out integer ids, so a
``Result`` offers both: ``ids`` as an int64 array (when every id is a decimal
integer) and ``str_ids`` exactly as the server sent them.

All of these are plain dataclasses built from the protobuf messages, so
callers never handle generated message types.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

from maxsimd._pb import types_pb2

# What the client accepts as document ids: a sequence of ints or strings, a
# 1-D integer or string numpy array, or a 1-D integer torch tensor (typed Any
# here so that torch stays an optional import).
IdsLike = Union[Sequence[Union[int, str]], np.ndarray, Any]


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
    scores: npt.NDArray[np.float32]
    timing: Optional[Timing] = None
    request_id: str = ""

    @cached_property
    def ids(self) -> npt.NDArray[np.int64]:
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

    def to_dicts(self) -> List[Dict[str, Any]]:
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
        query: token embeddings ``[Lq, d]``: a numpy array or torch tensor
            (any device) of a dtype ``maxsimd._encode.to_numpy`` accepts
            (float16, bfloat16, float32, float64, float8, integers), or
            nested lists.
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


# --------------------------------------------------------------------------
# Admin answers


def enum_name(enum: Any, prefix: str, value: int) -> str:
    """An enum value's short name ("dense" for LAYOUT_DENSE); the number as
    a string for a value newer than these stubs."""
    try:
        name: str = enum.Name(value)
    except ValueError:
        return str(value)
    return name[len(prefix):].lower() if name.startswith(prefix) else name


@dataclass(frozen=True)
class CorpusInfo:
    """One corpus, as ``GetCorpus``, ``ListCorpora``, ``CreateCorpus`` and
    ``LoadCorpus`` describe it (``maxsimd.v1.CorpusInfo``).

    Enums are short lower-case names, as ``create_corpus`` takes them:
    ``layout`` "dense" | "int8" | "plaid", ``placement`` "auto" | "gpu" |
    "host" (or "unspecified"), ``storage_dtype`` "float16" | "bfloat16" |
    "int8" | "plaid".

    Attributes:
        name, dim, layout, placement, normalize, storage_dtype: as created.
        num_documents: live documents (added and not deleted).
        num_tokens: tokens of the live documents.
        bytes: bytes of token storage held, deleted documents included until
            compaction.
        num_segments: immutable segments the corpus is made of.
        num_deleted: documents deleted but still stored.
        resident_on: where the tokens are now: "cpu" or "gpu:<ordinal>".
        streamed_bytes: of ``bytes``, those kept in host memory and streamed
            to the GPU by every search.
        quantize_queries: LAYOUT_INT8 only: queries quantised too.
        plaid_nbits, plaid_centroids: LAYOUT_PLAID only: the codec.
        pool_factor: token pooling at ingest (1: every token kept).
    """

    name: str
    dim: int
    layout: str
    placement: str
    normalize: bool
    storage_dtype: str
    num_documents: int = 0
    num_tokens: int = 0
    bytes: int = 0
    num_segments: int = 0
    num_deleted: int = 0
    resident_on: str = ""
    streamed_bytes: int = 0
    quantize_queries: bool = False
    plaid_nbits: int = 0
    plaid_centroids: int = 0
    pool_factor: int = 1

    @classmethod
    def from_proto(cls, m: Any) -> "CorpusInfo":
        return cls(
            name=m.name, dim=m.dim,
            layout=enum_name(types_pb2.Layout, "LAYOUT_", m.layout),
            placement=enum_name(types_pb2.Placement, "PLACEMENT_",
                                m.placement),
            normalize=m.normalize,
            storage_dtype=enum_name(types_pb2.DType, "DTYPE_",
                                    m.storage_dtype),
            num_documents=m.num_documents, num_tokens=m.num_tokens,
            bytes=m.bytes, num_segments=m.num_segments,
            num_deleted=m.num_deleted, resident_on=m.resident_on,
            streamed_bytes=m.streamed_bytes,
            quantize_queries=m.quantize_queries, plaid_nbits=m.plaid_nbits,
            plaid_centroids=m.plaid_centroids,
            pool_factor=max(1, m.pool_factor))


@dataclass(frozen=True)
class AddResult:
    """The answer of ``add_documents`` and ``import_documents``.

    Attributes:
        added: documents the call added (every one, or none on failure).
        corpus: the corpus after the commit.
    """

    added: int
    corpus: CorpusInfo

    @classmethod
    def from_proto(cls, m: Any) -> "AddResult":
        return cls(added=m.added, corpus=CorpusInfo.from_proto(m.corpus))


@dataclass(frozen=True)
class DeleteResult:
    """The answer of ``delete_documents``.

    Attributes:
        deleted: documents the call deleted.
        missing: ids that were not found (counted with
            ``ignore_missing=True``; otherwise they fail the call).
    """

    deleted: int
    missing: int = 0

    @classmethod
    def from_proto(cls, m: Any) -> "DeleteResult":
        return cls(deleted=m.deleted, missing=m.missing)
