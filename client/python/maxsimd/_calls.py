"""What the blocking ``Client`` and the asyncio ``AsyncClient`` share.

Everything between the caller's arguments and the gRPC stub lives here, once:
channel options, call metadata, building requests from numpy arrays or
torch tensors, parsing answers into ``Result`` and the admin dataclasses,
cutting an AddDocuments load into messages, the bookkeeping of a
RerankStream, and the table of calls (``Call``: each RPC's request, result
and whether it is retried), which both clients' methods name. The clients
(over ``maxsimd._base.ClientBase``) add only the transport: a blocking call
in a retry loop, or an awaited one.

Thread-safety: the functions and the ``Call`` table are pure. A
``StreamState`` is shared by the thread (or task) that sends a stream's
requests and the one that reads its responses, under its lock; a
``DocumentLoad`` and a ``BatchPlan`` belong to one call.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, AsyncIterable, AsyncIterator,
                    Callable, Dict, Generic, Iterable, Iterator, List,
                    Optional, Sequence, Tuple, TypeVar, Union)

import grpc
import numpy as np
import numpy.typing as npt

from maxsimd._encode import (check_send_dtype, encode_array, id_strings,
                             is_torch_tensor, to_matrix, to_numpy)
from maxsimd._pb import admin_pb2, reranker_pb2, types_pb2
from maxsimd.errors import (MaxsimdError, error_for, from_status_code,
                            invalid_argument)
from maxsimd.results import (AddResult, CorpusInfo, DeleteResult, IdsLike,
                             Query, Result)
from maxsimd.retry import RetryPolicy

if TYPE_CHECKING:
    from maxsimd._base import ClientBase

# The server's --max_message_bytes default. gRPC's own default receive limit
# is 4 MiB, below what a RerankBatch answer or a scan with a large top_k can
# reach, so the clients raise both limits to the server's.
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20

# Certificates and keys: PEM bytes, PEM text, or a path to a PEM file.
PemLike = Union[bytes, str, "os.PathLike[str]"]

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
HEALTH_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING",
                 3: "SERVICE_UNKNOWN"}
MAX_ADD_CHUNK = 8 << 20


# --------------------------------------------------------------------------
# Channel


@dataclass(frozen=True)
class TlsOptions:
    """TLS for the channel (grpc.ssl_channel_credentials).

    For a maxsimd started with ``--tls_cert``/``--tls_key`` (and, for mutual
    TLS, ``--tls_client_ca``), or for a proxy that terminates TLS in front of
    it (an ingress, a service mesh or an Envoy sidecar).

    Attributes:
        root_certificates: CA bundle that signs the server's certificate;
            None uses gRPC's default roots.
        private_key, certificate_chain: the client's key and certificate for
            mutual TLS; both or neither.
        server_name_override: the name to check the server's certificate
            against instead of the target's host (for example when the target
            is an IP address); sets ``grpc.ssl_target_name_override``.
    """

    root_certificates: Optional[PemLike] = None
    private_key: Optional[PemLike] = None
    certificate_chain: Optional[PemLike] = None
    server_name_override: Optional[str] = None

    def credentials(self) -> grpc.ChannelCredentials:
        if (self.private_key is None) != (self.certificate_chain is None):
            raise ValueError("TlsOptions: private_key and certificate_chain "
                             "go together (mutual TLS) or not at all")
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.root_certificates),
            private_key=_pem(self.private_key),
            certificate_chain=_pem(self.certificate_chain))


def _pem(value: Optional[PemLike]) -> Optional[bytes]:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str) and value.lstrip().startswith("-----BEGIN"):
        return value.encode("ascii")
    with open(value, "rb") as f:
        return f.read()


def tls_options(tls: Union[TlsOptions, bool, None]) -> Optional[TlsOptions]:
    """``tls`` as the client takes it (None/False, True, TlsOptions)."""
    if tls is True:
        return TlsOptions()
    return tls if isinstance(tls, TlsOptions) else None


def build_channel_options(policy: RetryPolicy, lb_policy: Optional[str],
                    max_message_bytes: int, tls: Optional[TlsOptions],
                    extra: Sequence[Tuple[str, Any]]
                    ) -> List[Tuple[str, Any]]:
    """The channel arguments of both clients; ``extra`` overrides them.

    ``max_message_bytes`` sets both gRPC limits (send and receive; -1 for
    none); a channel option of the same name in ``extra`` wins.
    """
    backoff_ms = max(1, int(policy.initial_backoff * 1000))
    options: Dict[str, Any] = {
        "grpc.max_send_message_length": max_message_bytes,
        "grpc.max_receive_message_length": max_message_bytes,
        # After a failed connection the channel reconnects only after its
        # own backoff (1 s growing to 120 s) and a fresh name resolution
        # (at most one per 30 s by default); until then every attempt
        # fails at once, so retries would be spent without reaching a
        # server that is back. Keep both in step with the retry policy.
        "grpc.initial_reconnect_backoff_ms": backoff_ms,
        "grpc.max_reconnect_backoff_ms":
            max(backoff_ms, int(policy.max_backoff * 1000)),
        "grpc.dns_min_time_between_resolutions_ms": backoff_ms,
    }
    if lb_policy:
        options["grpc.service_config"] = json.dumps(
            {"loadBalancingConfig": [{lb_policy: {}}]})
    if tls is not None and tls.server_name_override:
        options["grpc.ssl_target_name_override"] = tls.server_name_override
    options.update(dict(extra))
    return list(options.items())


def call_metadata(token: Optional[str],
                  metadata: Sequence[Tuple[str, str]]
                  ) -> Optional[Tuple[Tuple[str, str], ...]]:
    """The metadata of every call: ``metadata`` plus, with a token, its
    ``authorization`` entry. Refuses a token gRPC could not send (checked
    here, once, rather than failing every call), without quoting it."""
    entries = tuple(metadata)
    if token is not None:
        if not isinstance(token, str) or not token or any(
                not 0x21 <= ord(c) <= 0x7E for c in token):
            raise invalid_argument(
                "token must be a non-empty string of printable ASCII "
                "characters without white space")
        if any(key.lower() == "authorization" for key, _ in entries):
            raise invalid_argument(
                "token and an authorization entry in metadata exclude each "
                "other")
        entries = (("authorization", f"Bearer {token}"),) + entries
    return entries or None


# --------------------------------------------------------------------------
# Health (grpc.health.v1, encoded by hand: one string field does not justify
# generating and shipping the health protos)


def health_request(service: str) -> bytes:
    """HealthCheckRequest{service}: field 1, wire type 2."""
    data = service.encode("utf-8")
    if not data:
        return b""
    return b"\x0a" + _varint(len(data)) + data


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def health_status(response: bytes) -> str:
    """The status (field 1, varint) of a HealthCheckResponse, by name."""
    value = 0
    if len(response) >= 2 and response[0] == 0x08:
        shift = 0
        for byte in response[1:]:
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
    return HEALTH_STATUS.get(value, "UNKNOWN")


# --------------------------------------------------------------------------
# Queries


def empty_result(request_id: str = "") -> Result:
    return Result(str_ids=[], scores=np.empty(0, dtype=np.float32),
                  timing=None, request_id=request_id)


def rerank_request(query: Query, send_dtype: Optional[str],
                   natural: Optional[str] = None) -> Optional[Any]:
    """The RerankRequest for ``query``; None for an empty candidate list.

    An empty ``candidate_ids`` means "scan the whole corpus" on the wire,
    so a query whose first stage found nothing must not be sent: the
    callers answer it locally with an empty result. ``natural`` names the
    16-bit type a float32 ``query`` was converted from (see ``to_numpy``).
    """
    a, own = to_matrix(query.query, "query")
    request = reranker_pb2.RerankRequest(
        corpus=query.corpus,
        query=encode_array(a, own or natural, send_dtype),
        top_k=query.top_k, request_id=query.request_id,
        priority=query.priority)
    if query.candidates is not None:
        ids = id_strings(query.candidates, "candidates")
        if not ids:
            return None
        request.candidate_ids.extend(ids)
    return request


def split_queries(queries: Any) -> Tuple[Sequence[Any], Optional[str]]:
    """``rerank_batch``'s queries as a sequence of ``[Lq, d]`` matrices, and
    the 16-bit type they were converted from (see ``to_numpy``).

    One ``[B, Lq, d]`` array or tensor is converted once (one copy from the
    GPU, not B) and split; a sequence is returned as it is.
    """
    if is_torch_tensor(queries) or isinstance(queries, np.ndarray):
        a, natural = to_numpy(queries, "queries")
        if a.ndim != 3:
            raise invalid_argument(
                f"queries must be [B, Lq, d] or a sequence of [Lq, d]; got "
                f"shape {tuple(a.shape)}")
        return list(a), natural
    return list(queries), None


class BatchPlan:
    """One RerankBatch call: the request, and where each answer goes.

    Queries whose candidate list is empty are answered locally (on the wire
    an empty list would scan). ``request`` is None when no query needs the
    server.
    """

    def __init__(self, corpus: str, queries: Any,
                 candidates: Optional[Sequence[Optional[IdsLike]]],
                 top_k: int, send_dtype: Optional[str]) -> None:
        rows, natural = split_queries(queries)
        n = len(rows)
        if candidates is not None and len(candidates) != n:
            raise invalid_argument(
                f"candidates has {len(candidates)} entries for {n} queries")
        self._results: List[Optional[Result]] = [None] * n
        self._sent: List[int] = []
        batch = reranker_pb2.RerankBatchRequest()
        for i, row in enumerate(rows):
            request = rerank_request(Query(
                corpus, row, None if candidates is None else candidates[i],
                top_k, request_id=str(i)), send_dtype, natural)
            if request is None:
                self._results[i] = empty_result(str(i))
            else:
                batch.queries.append(request)
                self._sent.append(i)
        self.request: Optional[Any] = batch if self._sent else None

    def results(self, response: Optional[Any]) -> List[Result]:
        """The results in query order, from the call's ``response`` (None
        when ``request`` was None)."""
        if response is not None:
            if len(response.results) != len(self._sent):
                raise error_for(grpc.StatusCode.INTERNAL,
                                f"{len(response.results)} results for "
                                f"{len(self._sent)} queries",
                                method="RerankBatch")
            for i, r in zip(self._sent, response.results):
                self._results[i] = Result.from_proto(r)
        out: List[Result] = []
        for r in self._results:
            assert r is not None, "a query of the batch got no result"
            out.append(r)
        return out


# --------------------------------------------------------------------------
# Admin requests


def enum_value(enum: Any, prefix: str, value: Union[str, int, None]) -> int:
    """An enum value from a short name ("dense"), a full name or a number."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    name = value.upper()
    if not name.startswith(prefix):
        name = prefix + name
    try:
        number: int = enum.Value(name)
        return number
    except ValueError:
        names = [n[len(prefix):].lower() for n in enum.keys()
                 if not n.endswith("UNSPECIFIED")]
        raise invalid_argument(
            f"{value!r} is not one of {', '.join(names)}") from None


def create_corpus_request(name: str, dim: int,
                          layout: Union[str, int, None],
                          placement: Union[str, int, None], normalize: bool,
                          storage_dtype: Union[str, int, None],
                          quantize_queries: Optional[bool], plaid_nbits: int,
                          plaid_centroids: int, pool_factor: int) -> Any:
    request = admin_pb2.CreateCorpusRequest(
        name=name, dim=dim,
        layout=enum_value(types_pb2.Layout, "LAYOUT_", layout),
        placement=enum_value(types_pb2.Placement, "PLACEMENT_", placement),
        normalize=normalize,
        storage_dtype=enum_value(types_pb2.DType, "DTYPE_", storage_dtype),
        plaid_nbits=plaid_nbits, plaid_centroids=plaid_centroids,
        pool_factor=pool_factor)
    # None: the server's choice. An explicit choice goes to an int8 corpus
    # only; with another layout False means nothing and True is refused by
    # the server, naming quantize_queries.
    if quantize_queries is not None and request.layout == types_pb2.LAYOUT_INT8:
        request.query_quantization = (
            admin_pb2.QUERY_QUANTIZATION_INT8 if quantize_queries
            else admin_pb2.QUERY_QUANTIZATION_FLOAT16)
    elif quantize_queries:
        request.quantize_queries = True
    return request


class DocumentLoad:
    """``add_documents``' documents, validated up front and cut into the
    messages of one AddDocuments stream.

    Every check runs in the constructor, on the caller's thread, where it can
    raise: ``messages()`` is consumed by gRPC (on its own thread, or in the
    event loop), where an exception would only cancel the stream. So the
    constructor also converts the documents to numpy arrays (a GPU tensor is
    copied to the host here, once; a float16/32/64 numpy array or CPU tensor
    is not copied) and decides where the messages are cut; ``messages()``
    then gathers and encodes each message's documents as gRPC asks for it.

    A message carries whole documents (AddDocumentsRequest pairs each id
    with all of its tokens; a document cannot span messages), at most
    ``chunk_bytes`` of tokens unless one document alone is larger, and never
    more than ``max_message_bytes`` in all (ids and headers included). A
    document that cannot fit that limit is refused here, naming it.
    """

    def __init__(self, corpus: str, ids: IdsLike,
                 docs: Union[Sequence[Any], Tuple[Any, Any], None],
                 tokens: Any, cu_seqlens: Any, send_dtype: Optional[str],
                 chunk_bytes: int, max_message_bytes: Optional[int]) -> None:
        check_send_dtype(send_dtype)
        self.corpus = corpus
        self.ids = id_strings(ids, "ids")
        self._rows, self.counts, self.dim, natural = document_rows(
            docs, tokens, cu_seqlens)
        if len(self.counts) != len(self.ids):
            raise invalid_argument(
                f"{len(self.ids)} ids for {len(self.counts)} documents")
        self.dtype = send_dtype or natural or "float32"
        self.cuts = self._cut(chunk_bytes, max_message_bytes)

    def _cut(self, chunk_bytes: int,
             max_message_bytes: Optional[int]) -> List[int]:
        """The first document of every message, and len(ids) at the end."""
        itemsize = 2 if self.dtype in ("float16", "bfloat16") else 4
        limit = max_message_bytes if max_message_bytes is not None and \
            max_message_bytes >= 0 else None
        # An upper bound of the encoded message (protobuf: a tag and a
        # length varint per field): the corpus name, the token_counts and
        # tokens headers, then per document its tokens, its id and its
        # count.
        fixed = len(self.corpus.encode("utf-8")) + _MESSAGE_OVERHEAD
        cuts = [0]
        tokens, total = 0, fixed
        for i, (doc_id, count) in enumerate(zip(self.ids, self.counts)):
            nbytes = count * self.dim * itemsize
            id_bytes = len(doc_id.encode("utf-8"))
            size = nbytes + id_bytes + len(_varint(id_bytes)) + \
                _DOCUMENT_OVERHEAD
            if limit is not None and fixed + size > limit:
                hint = " or send it as 16 bits (send_dtype=\"float16\")" \
                    if itemsize == 4 else ""
                raise invalid_argument(
                    f"add_documents: document {i} (id {doc_id!r}, {count} "
                    f"tokens x {self.dim} dims as {self.dtype}) needs "
                    f"{fixed + size} bytes in its message, above the message "
                    f"limit of {limit} bytes (max_message_bytes). A document "
                    "cannot span AddDocuments messages: raise "
                    "max_message_bytes (and the server's "
                    f"--max_message_bytes){hint}")
            if i > cuts[-1] and (
                    tokens + nbytes > chunk_bytes or
                    (limit is not None and total + size > limit)):
                cuts.append(i)
                tokens, total = 0, fixed
            tokens += nbytes
            total += size
        cuts.append(len(self.ids))
        return cuts

    def messages(self) -> Iterator[Any]:
        if not self.counts:  # nothing to add: the server answers added = 0
            yield admin_pb2.AddDocumentsRequest(corpus=self.corpus)
            return
        for first, last in zip(self.cuts, self.cuts[1:]):
            yield admin_pb2.AddDocumentsRequest(
                corpus=self.corpus, ids=self.ids[first:last],
                token_counts=self.counts[first:last],
                tokens=encode_array(self._rows(first, last), None,
                                    self.dtype))


# Bounds of an AddDocumentsRequest's bytes besides the tokens' data and the
# ids' text: corpus tag and length (6), token_counts tag and length (6),
# tokens tag and length (6), Tensor dtype (2), shape (2 + 2 varints of at
# most 10), data tag and length (6): 48; per document, besides its id's
# length varint, the id's tag (1) and its count's varint (5, an int32).
_MESSAGE_OVERHEAD = 64
_DOCUMENT_OVERHEAD = 6


def ndim(x: Any) -> int:
    ndim = getattr(x, "ndim", None)  # arrays and tensors, on any device
    return int(ndim) if ndim is not None else int(np.ndim(x))


RowsFn = Callable[[int, int], npt.NDArray[Any]]


def document_rows(docs: Any, tokens: Any, cu_seqlens: Any
                  ) -> Tuple[RowsFn, List[int], int, Optional[str]]:
    """Validates documents and returns (rows, counts, dim, natural dtype).

    ``docs`` is a list of ``[Ld, d]`` arrays or tensors, one ``[N, Ld, d]``,
    or ``(tokens, cu_seqlens)``; else ``tokens`` ``[T, d]`` with
    ``cu_seqlens`` ``[N + 1]``. Every input is converted to numpy here
    (``to_numpy``: one host copy of a device tensor, none of a numpy array).
    ``rows(first, last)`` gives the token rows of documents [first, last) as
    one array (a view or a concatenation). The natural dtype is the 16-bit
    float type every document shares (sent as is by default), else None.
    """
    if isinstance(docs, tuple) and len(docs) == 2 and tokens is None and \
            ndim(docs[1]) == 1:
        tokens, cu_seqlens = docs
        docs = None
    if (docs is None) == (tokens is None):
        raise invalid_argument(
            "add_documents takes docs (a list of [Ld, d] arrays) or "
            "tokens with cu_seqlens, not both")
    if docs is not None:
        if is_torch_tensor(docs) or isinstance(docs, np.ndarray):
            # One [N, Ld, d] array or tensor: N documents of Ld tokens.
            whole, natural = to_numpy(docs, "docs")
            if whole.ndim != 3:
                raise invalid_argument(
                    f"docs has shape {tuple(whole.shape)}; need a list of "
                    "[Ld, d] arrays or one [N, Ld, d] array")
            arrays: List[npt.NDArray[Any]] = list(whole)
            naturals = {natural}
        else:
            arrays, naturals = [], set()
            for i, d in enumerate(docs):
                a, natural = to_numpy(d, f"docs[{i}]")
                if a.ndim != 2:
                    raise invalid_argument(
                        f"docs[{i}] has shape {tuple(a.shape)} and dtype "
                        f"{a.dtype}; need a 2-D float array [Ld, d]")
                arrays.append(a)
                naturals.add(natural)
        dims = {a.shape[1] for a in arrays}
        if len(dims) > 1:
            raise invalid_argument(f"docs have different dims {sorted(dims)}")
        dim = dims.pop() if dims else 0

        def rows(first: int, last: int) -> npt.NDArray[Any]:
            if last - first == 1:
                return arrays[first]
            return np.concatenate(arrays[first:last])

        shared = naturals.pop() if len(naturals) == 1 else None
        return rows, [a.shape[0] for a in arrays], dim, shared
    if cu_seqlens is None:
        raise invalid_argument("tokens needs cu_seqlens")
    t, natural = to_numpy(tokens, "tokens")
    cu, _ = to_numpy(cu_seqlens, "cu_seqlens")
    if t.ndim != 2:
        raise invalid_argument(
            f"tokens has shape {tuple(t.shape)} and dtype {t.dtype}; need a "
            "2-D float array [T, d]")
    if cu.ndim != 1 or cu.dtype.kind not in "iu" or cu.size < 1:
        raise invalid_argument(
            f"cu_seqlens has shape {tuple(cu.shape)} and dtype {cu.dtype}; "
            "need 1-D integers [N + 1]")
    cu = cu.astype(np.int64)
    if cu[0] != 0 or cu[-1] != t.shape[0] or np.any(np.diff(cu) < 0):
        raise invalid_argument(
            f"cu_seqlens must start at 0, never decrease and end at "
            f"{t.shape[0]} (the token count); it runs {cu[0]}..{cu[-1]}")

    def ragged_rows(first: int, last: int) -> npt.NDArray[Any]:
        return t[cu[first]:cu[last]]

    return ragged_rows, np.diff(cu).tolist(), t.shape[1], natural


# --------------------------------------------------------------------------
# RerankStream


def check_stream_queries(queries: Iterable[Query]) -> bool:
    """Whether ``queries`` can be replayed (a Sequence); for one, refuses a
    repeated request_id before anything is sent."""
    if not isinstance(queries, Sequence):
        return False
    seen: Dict[str, int] = {}
    for i, q in enumerate(queries):
        rid = q.request_id or str(i)
        if rid in seen:
            raise invalid_argument(
                f"queries[{i}] repeats request_id {rid!r} of "
                f"queries[{seen[rid]}]")
        seen[rid] = i
    return True


StreamItem = Union[Result, MaxsimdError]


class StreamState:
    """Book-keeping of one RerankStream attempt, shared by the sender of the
    requests (a gRPC thread, or a task of the event loop) and the reader of
    the responses (the caller).
    """

    def __init__(self, send_dtype: Optional[str]) -> None:
        self.send_dtype = send_dtype
        self.lock = threading.Lock()
        self.index_of: Dict[str, int] = {}
        # Answers made without the server (client-side errors, and queries
        # with no candidates), by query index, until the reader picks them up.
        self.local: Dict[int, StreamItem] = {}
        self.sent = 0
        self.received = 0
        # A failure that ends the stream (a repeated request_id, or the
        # caller's iterator raising), raised once the sent queries are in.
        self.error: Optional[BaseException] = None

    def _prepare(self, index: int, q: Query) -> Optional[Any]:
        """The request for query ``index``, or None when it is answered
        locally or ends the stream (``error`` set)."""
        rid = q.request_id or str(index)
        with self.lock:
            if rid in self.index_of:
                self.error = invalid_argument(
                    f"query {index} repeats request_id {rid!r} of query "
                    f"{self.index_of[rid]}")
                return None
            self.index_of[rid] = index
        try:
            request = rerank_request(Query(
                q.corpus, q.query, q.candidates, q.top_k, rid, q.priority),
                self.send_dtype)
        except MaxsimdError as e:
            e.method = "RerankStream"
            with self.lock:
                self.local[index] = e
            return None
        with self.lock:
            if request is None:
                self.local[index] = empty_result(rid)
            else:
                self.sent += 1
        return request

    # The request iterators run where nothing may raise (gRPC would only log
    # it and cancel the call), so every failure is handed to the reader.

    def requests(self, queries: Iterable[Query]) -> Iterator[Any]:
        try:
            for index, q in enumerate(queries):
                request = self._prepare(index, q)
                if self.error is not None:
                    return
                if request is not None:
                    yield request
        except Exception as e:  # noqa: BLE001 - the caller's iterator failed
            with self.lock:
                self.error = e

    async def requests_async(
            self, queries: Union[Iterable[Query], AsyncIterable[Query]]
    ) -> AsyncIterator[Any]:
        try:
            if isinstance(queries, AsyncIterable):
                index = 0
                async for q in queries:
                    request = self._prepare(index, q)
                    index += 1
                    if self.error is not None:
                        return
                    if request is not None:
                        yield request
            else:
                for request in self.requests(queries):
                    yield request
        except Exception as e:  # noqa: BLE001 - the caller's iterator failed
            with self.lock:
                self.error = e

    def take_local(self) -> Dict[int, StreamItem]:
        with self.lock:
            local, self.local = self.local, {}
        return local


class StreamCollator:
    """Puts a stream's responses (and local answers) in the order the caller
    asked for: query order (buffering early ones) or arrival order."""

    def __init__(self, state: StreamState, ordered: bool) -> None:
        self.state = state
        self.ordered = ordered
        self.pending: Dict[int, StreamItem] = {}
        self.next_index = 0

    def on_response(self, response: Any) -> List[StreamItem]:
        state = self.state
        state.received += 1
        with state.lock:
            index = state.index_of.get(response.request_id)
        if index is None:
            raise error_for(grpc.StatusCode.INTERNAL,
                            f"response for unknown request_id "
                            f"{response.request_id!r}", method="RerankStream")
        item: StreamItem
        if response.status_code == 0:
            item = Result.from_proto(response)
        else:
            item = from_status_code(response.status_code,
                                    response.status_message,
                                    method="RerankStream")
        # Local answers of queries sent before this one are recorded by
        # now: the sender records them before it sends the next query.
        local = state.take_local()
        if not self.ordered:
            return [local[i] for i in sorted(local)] + [item]
        self.pending.update(local)
        self.pending[index] = item
        out = []
        while self.next_index in self.pending:
            out.append(self.pending.pop(self.next_index))
            self.next_index += 1
        return out

    def on_end(self) -> List[StreamItem]:
        """What is left once the server closed the stream."""
        self.pending.update(self.state.take_local())
        out = [self.pending[i] for i in sorted(self.pending)]
        self.pending = {}
        return out

    def check_end(self) -> None:
        """Raises what ended the stream early, after ``on_end``'s items."""
        state = self.state
        if state.error is not None:
            raise state.error
        if state.received != state.sent:
            raise error_for(grpc.StatusCode.INTERNAL,
                            f"stream closed after {state.received} responses "
                            f"to {state.sent} queries", method="RerankStream")


def emit(item: StreamItem, return_exceptions: bool) -> StreamItem:
    """A stream's item for the caller: a rejected query's error is raised
    unless ``return_exceptions``."""
    if isinstance(item, MaxsimdError) and not return_exceptions:
        raise item
    return item


# --------------------------------------------------------------------------
# The calls: one entry per unary (or client-streaming) RPC, which both
# clients' methods name and nothing else restates.

R = TypeVar("R")


@dataclass(frozen=True)
class Prepared(Generic[R]):
    """A call ready to be made: its request, and how the answer becomes the
    method's result. ``request`` None means no call is needed (a query with
    an empty candidate list): the result is ``finish(None)``."""

    request: Any
    finish: Callable[[Any], R]


@dataclass(frozen=True)
class Call(Generic[R]):
    """One RPC, as both clients make it.

    Attributes:
        service: "Reranker" or "Admin" (maxsimd.v1), or "Health"
            (grpc.health.v1).
        rpc: the service's method.
        prepare: ``(client, *args, **kwargs) -> Prepared``: checks the
            method's arguments and builds the request, on the caller's
            thread, so that a client-side error raises there and before any
            call. ``client`` is the calling ``ClientBase`` (for
            ``send_dtype`` and ``max_send_bytes``).
        retryable: whether a failed attempt may be tried again: True,
            False, or a predicate of the request. This table is the one
            place where that is decided (client/python/README.md, "Deadlines
            and retries", gives the reasons).
    """

    service: str
    rpc: str
    prepare: Callable[..., Prepared[R]]
    retryable: Union[bool, Callable[[Any], bool]]

    @property
    def method(self) -> str:
        """The name errors carry: "GetCorpus", or "Health.Check" outside
        maxsimd.v1."""
        if self.service in ("Reranker", "Admin"):
            return self.rpc
        return f"{self.service}.{self.rpc}"

    def retries(self, request: Any) -> bool:
        """Whether an attempt of ``request`` that failed may be repeated."""
        if isinstance(self.retryable, bool):
            return self.retryable
        return self.retryable(request)


def _no_result(response: Any) -> None:
    return None


def _prepare_rerank(client: "ClientBase", query: Query) -> Prepared[Result]:
    request = rerank_request(query, client.send_dtype)
    if request is None:
        return Prepared(None, lambda _: empty_result(query.request_id))
    return Prepared(request, Result.from_proto)


def _prepare_rerank_batch(
        client: "ClientBase", corpus: str, queries: Any,
        candidates: Optional[Sequence[Optional[IdsLike]]],
        top_k: int) -> Prepared[List[Result]]:
    plan = BatchPlan(corpus, queries, candidates, top_k, client.send_dtype)
    return Prepared(plan.request, plan.results)


def _prepare_add_documents(
        client: "ClientBase", corpus: str, ids: IdsLike, docs: Any,
        tokens: Any, cu_seqlens: Any, send_dtype: Optional[str],
        chunk_bytes: int) -> Prepared[AddResult]:
    load = DocumentLoad(corpus, ids, docs, tokens, cu_seqlens,
                        send_dtype or client.send_dtype, chunk_bytes,
                        client.max_send_bytes)
    return Prepared(load.messages(), AddResult.from_proto)


def _prepare_delete_documents(client: "ClientBase", corpus: str,
                              ids: IdsLike, ignore_missing: bool
                              ) -> Prepared[DeleteResult]:
    return Prepared(admin_pb2.DeleteDocumentsRequest(
        corpus=corpus, ids=id_strings(ids, "ids"),
        ignore_missing=ignore_missing), DeleteResult.from_proto)


def _prepare_import_documents(client: "ClientBase", corpus: str,
                              tokens_npy: str, cu_seqlens_npy: str,
                              safetensors: str, ids: str, plaid_dir: str
                              ) -> Prepared[AddResult]:
    return Prepared(admin_pb2.ImportDocumentsRequest(
        corpus=corpus, tokens_npy=tokens_npy, cu_seqlens_npy=cu_seqlens_npy,
        safetensors=safetensors, ids=ids, plaid_dir=plaid_dir),
        AddResult.from_proto)


# Retried: reads, and writes whose repetition leaves the same state
# (SetAlias, SetLogLevel; DeleteDocuments only with ignore_missing, since a
# repeat would otherwise fail NOT_FOUND on the ids the first attempt
# deleted). Not retried: writes whose acknowledgement, if lost, would make a
# repeat answer ALREADY_EXISTS / NOT_FOUND or add a second copy.
# RerankStream, a bidirectional stream, has its own rule
# (``StreamAttempts``).

RERANK: Call[Result] = Call(
    "Reranker", "Rerank", _prepare_rerank, retryable=True)
RERANK_BATCH: Call[List[Result]] = Call(
    "Reranker", "RerankBatch", _prepare_rerank_batch, retryable=True)
HEALTH: Call[str] = Call(
    "Health", "Check",
    lambda _, service: Prepared(health_request(service), health_status),
    retryable=True)
CREATE_CORPUS: Call[CorpusInfo] = Call(
    "Admin", "CreateCorpus",
    lambda _, *args: Prepared(create_corpus_request(*args),
                              CorpusInfo.from_proto),
    retryable=False)
DROP_CORPUS: Call[None] = Call(
    "Admin", "DropCorpus",
    lambda _, name: Prepared(admin_pb2.DropCorpusRequest(name=name),
                             _no_result),
    retryable=False)
GET_CORPUS: Call[CorpusInfo] = Call(
    "Admin", "GetCorpus",
    lambda _, name: Prepared(admin_pb2.GetCorpusRequest(name=name),
                             CorpusInfo.from_proto),
    retryable=True)
LIST_CORPORA: Call[List[CorpusInfo]] = Call(
    "Admin", "ListCorpora",
    lambda _: Prepared(admin_pb2.ListCorporaRequest(), lambda response: [
        CorpusInfo.from_proto(c) for c in response.corpora]),
    retryable=True)
ADD_DOCUMENTS: Call[AddResult] = Call(
    "Admin", "AddDocuments", _prepare_add_documents, retryable=False)
DELETE_DOCUMENTS: Call[DeleteResult] = Call(
    "Admin", "DeleteDocuments", _prepare_delete_documents,
    retryable=lambda request: bool(request.ignore_missing))
IMPORT_DOCUMENTS: Call[AddResult] = Call(
    "Admin", "ImportDocuments", _prepare_import_documents, retryable=False)
SET_ALIAS: Call[str] = Call(
    "Admin", "SetAlias",
    lambda _, alias, corpus: Prepared(
        admin_pb2.SetAliasRequest(alias=alias, corpus=corpus),
        lambda response: str(response.previous_corpus)),
    retryable=True)
DELETE_ALIAS: Call[None] = Call(
    "Admin", "DeleteAlias",
    lambda _, alias: Prepared(admin_pb2.DeleteAliasRequest(alias=alias),
                              _no_result),
    retryable=False)
LIST_ALIASES: Call[Dict[str, str]] = Call(
    "Admin", "ListAliases",
    lambda _: Prepared(admin_pb2.ListAliasesRequest(), lambda response: {
        a.alias: a.corpus for a in response.aliases}),
    retryable=True)
SNAPSHOT_CORPUS: Call[int] = Call(
    "Admin", "SnapshotCorpus",
    lambda _, name, path: Prepared(
        admin_pb2.SnapshotCorpusRequest(name=name, path=path),
        lambda response: int(response.num_documents)),
    retryable=False)
LOAD_CORPUS: Call[CorpusInfo] = Call(
    "Admin", "LoadCorpus",
    lambda _, path, name: Prepared(
        admin_pb2.LoadCorpusRequest(path=path, name=name),
        CorpusInfo.from_proto),
    retryable=False)
GET_LOG_LEVEL: Call[str] = Call(
    "Admin", "GetLogLevel",
    lambda _: Prepared(admin_pb2.GetLogLevelRequest(),
                       lambda response: str(response.level)),
    retryable=True)
SET_LOG_LEVEL: Call[str] = Call(
    "Admin", "SetLogLevel",
    lambda _, level: Prepared(admin_pb2.SetLogLevelRequest(level=level),
                              lambda response: str(response.previous_level)),
    retryable=True)
