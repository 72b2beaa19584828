"""``Client``: one maxsimd endpoint (a server, or the replicas behind a name).

Thread-safety: a Client may be shared by many threads. It holds one gRPC
channel, which multiplexes concurrent calls over its connections, and the
generated stubs, which are thread-safe. Iterators returned by
``rerank_stream`` belong to the thread that consumes them.

Retries (see ``maxsimd.retry``): calls that are safe to repeat are retried on
UNAVAILABLE with exponential backoff and jitter, within the call's deadline.
Writes whose repetition could change the outcome after a lost acknowledgement
are tried once; client/python/README.md has the table and the reasons.
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import (Any, Dict, Iterable, Iterator, List, Optional, Sequence,
                    Tuple, Union)

import grpc
import numpy as np

from maxsimd._encode import encode_tensor, id_strings
from maxsimd._pb import (admin_pb2, admin_pb2_grpc, reranker_pb2,
                         reranker_pb2_grpc, types_pb2)
from maxsimd.errors import (MaxsimdError, error_for, from_rpc_error,
                            from_status_code, invalid_argument)
from maxsimd.results import IdsLike, Query, Result
from maxsimd.retry import RetryPolicy, call_with_retry

# Certificates and keys: PEM bytes, PEM text, or a path to a PEM file.
PemLike = Union[bytes, str, "os.PathLike[str]"]

_HEALTH_CHECK = "/grpc.health.v1.Health/Check"
_HEALTH_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING",
                  3: "SERVICE_UNKNOWN"}
_MAX_ADD_CHUNK = 8 << 20


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


def _call_metadata(token: Optional[str],
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


def _enum(enum: Any, prefix: str, value: Union[str, int, None]) -> int:
    """An enum value from a short name ("dense"), a full name or a number."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    name = value.upper()
    if not name.startswith(prefix):
        name = prefix + name
    try:
        return enum.Value(name)
    except ValueError:
        names = [n[len(prefix):].lower() for n in enum.keys()
                 if not n.endswith("UNSPECIFIED")]
        raise invalid_argument(
            f"{value!r} is not one of {', '.join(names)}") from None


def _health_request(service: str) -> bytes:
    """grpc.health.v1.HealthCheckRequest{service}, encoded by hand.

    One string field does not justify generating (and shipping) the health
    protos; field 1, wire type 2 (length-delimited).
    """
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


def _health_status(response: bytes) -> int:
    """The status (field 1, varint) of a HealthCheckResponse; 0 if absent."""
    if len(response) >= 2 and response[0] == 0x08:
        value, shift = 0, 0
        for byte in response[1:]:
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value
    return 0


class _StreamState:
    """Book-keeping of one RerankStream attempt, shared by the thread that
    sends requests (gRPC's) and the one that reads responses (the caller's).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.index_of: Dict[str, int] = {}
        # Answers made without the server (client-side errors, and queries
        # with no candidates), by query index, until the reader picks them up.
        self.local: Dict[int, Union[Result, MaxsimdError]] = {}
        self.sent = 0
        self.received = 0
        # A failure that ends the stream (a repeated request_id, or the
        # caller's iterator raising), raised once the sent queries are in.
        self.error: Optional[BaseException] = None

    def take_local(self) -> Dict[int, Union[Result, MaxsimdError]]:
        with self.lock:
            local, self.local = self.local, {}
        return local


def _empty_result(request_id: str = "") -> Result:
    return Result(str_ids=[], scores=np.empty(0, dtype=np.float32),
                  timing=None, request_id=request_id)


class Client:
    """A maxsimd client for one target.

    Args:
        target: a gRPC target: ``host:port``, or ``dns:///name:port`` to
            spread calls over every address the name resolves to (the
            replicas of one shard, e.g. a Kubernetes headless service).
        tls: None or False for plaintext, True for TLS with default roots,
            or a ``TlsOptions``.
        default_timeout: deadline in seconds of a call that passes no
            ``timeout``; None or ``math.inf`` for no deadline.
        max_retries: retries after the first attempt of a retryable call.
        backoff: seconds before the first retry; doubles up to
            ``max_backoff``, with full jitter.
        retry_policy: full control over retries; replaces ``max_retries``,
            ``backoff`` and ``max_backoff`` when given.
        lb_policy: gRPC load-balancing policy for the channel's service
            config; "round_robin" (the default) spreads calls over all
            resolved addresses, "pick_first" sticks to one, None leaves the
            choice to the resolver's service config.
        max_message_bytes: largest message sent or received; match the
            server's ``--max_message_bytes``.
        send_dtype: wire dtype of embeddings: None (float16 arrays as
            float16, everything else float32), "float32", "float16" or
            "bfloat16".
        token: a bearer token sent with every call as ``authorization:
            Bearer <token>`` metadata: an admin token for the admin calls of
            a server with ``--admin_token_file``, or a query token under
            ``--query_auth=token``. It travels in clear text unless ``tls``
            is set. The server answers UnauthenticatedError for a missing or
            unknown token and PermissionDeniedError for a query token on an
            admin call.
        metadata: gRPC metadata sent with every call (e.g. for a proxy in
            front of the server); with ``token``, do not also pass an
            ``authorization`` entry.
        interceptors: gRPC client interceptors wrapped around the channel.
        channel_options: extra gRPC channel arguments; they override the
            client's own.
    """

    def __init__(self, target: str, *,
                 tls: Union[TlsOptions, bool, None] = None,
                 default_timeout: Optional[float] = 30.0,
                 max_retries: int = 3,
                 backoff: float = 0.1,
                 max_backoff: float = 2.0,
                 retry_policy: Optional[RetryPolicy] = None,
                 lb_policy: Optional[str] = "round_robin",
                 max_message_bytes: int = 64 << 20,
                 send_dtype: Optional[str] = None,
                 token: Optional[str] = None,
                 metadata: Sequence[Tuple[str, str]] = (),
                 interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
                 channel_options: Sequence[Tuple[str, Any]] = ()) -> None:
        self.target = target
        self.default_timeout = default_timeout
        self.retry_policy = retry_policy or RetryPolicy(
            max_attempts=max_retries + 1, initial_backoff=backoff,
            max_backoff=max_backoff)
        self.send_dtype = send_dtype
        self._metadata = _call_metadata(token, metadata)
        self._rng = random.Random()

        policy = self.retry_policy
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
        if isinstance(tls, TlsOptions) and tls.server_name_override:
            options["grpc.ssl_target_name_override"] = tls.server_name_override
        options.update(dict(channel_options))
        opts = list(options.items())
        if tls is True:
            tls = TlsOptions()
        if isinstance(tls, TlsOptions):
            self._channel = grpc.secure_channel(target, tls.credentials(),
                                                opts)
        else:
            self._channel = grpc.insecure_channel(target, opts)
        channel = self._channel
        if interceptors:
            channel = grpc.intercept_channel(channel, *interceptors)
        self._reranker = reranker_pb2_grpc.RerankerStub(channel)
        self._admin = admin_pb2_grpc.AdminStub(channel)
        self._health = channel.unary_unary(_HEALTH_CHECK)

    # ------------------------------------------------------------------
    # Lifetime

    def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"maxsimd.Client({self.target!r})"

    # ------------------------------------------------------------------
    # Plumbing

    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        t = self.default_timeout if timeout is None else timeout
        return None if t is None or math.isinf(t) else t

    def _unary(self, method: str, stub_method: Any, request: Any,
               timeout: Optional[float], retryable: bool) -> Any:
        return call_with_retry(
            lambda remaining: stub_method(request, timeout=remaining,
                                          metadata=self._metadata),
            method=method, policy=self.retry_policy,
            timeout=self._timeout(timeout), retryable=retryable, rng=self._rng)

    def to_request(self, query: Query) -> Optional[Any]:
        """The RerankRequest for ``query``; None for an empty candidate list.

        An empty ``candidate_ids`` means "scan the whole corpus" on the wire,
        so a query whose first stage found nothing must not be sent: the
        callers answer it locally with an empty result.
        """
        request = reranker_pb2.RerankRequest(
            corpus=query.corpus,
            query=encode_tensor(query.query, "query", self.send_dtype),
            top_k=query.top_k, request_id=query.request_id,
            priority=query.priority)
        if query.candidates is not None:
            ids = id_strings(query.candidates, "candidates")
            if not ids:
                return None
            request.candidate_ids.extend(ids)
        return request

    # ------------------------------------------------------------------
    # Reranker

    def rerank(self, corpus: str, query: Any,
               candidates: Optional[IdsLike] = None, *, top_k: int = 10,
               request_id: str = "", priority: int = 0,
               timeout: Optional[float] = None) -> Result:
        """Ranks ``candidates`` (None: the whole corpus) for one query.

        Args:
            corpus: corpus name or alias.
            query: ``[Lq, d]`` token embeddings, float32 or float16.
            candidates: document ids (ints or strings); None scans the
                corpus; an empty list returns an empty result without a call.
            top_k: documents to return (fewer when fewer are ranked).
            timeout: deadline in seconds for the call, retries included.
        Raises:
            MaxsimdError (a subclass per code): INVALID_ARGUMENT for a bad
            query, NOT_FOUND for an unknown corpus or candidate, ...
        """
        request = self.to_request(Query(corpus, query, candidates, top_k,
                                     request_id, priority))
        if request is None:
            return _empty_result(request_id)
        response = self._unary("Rerank", self._reranker.Rerank, request,
                               timeout, retryable=True)
        return Result.from_proto(response)

    def rerank_batch(self, corpus: str,
                     queries: Union[Sequence[Any], np.ndarray],
                     candidates: Optional[Sequence[Optional[IdsLike]]] = None,
                     *, top_k: int = 10,
                     timeout: Optional[float] = None) -> List[Result]:
        """Ranks several queries in one RerankBatch message, in order.

        Args:
            queries: a sequence of ``[Lq_i, d]`` arrays, or one ``[B, Lq, d]``
                array.
            candidates: None to scan for every query, or one entry per query
                (None for a scan of that query).
        The server validates the batch as a whole: one bad query fails the
        call. At most the server's ``--max_batch_queries`` queries.
        """
        n = len(queries)
        if candidates is not None and len(candidates) != n:
            raise invalid_argument(
                f"candidates has {len(candidates)} entries for {n} queries")
        results: List[Optional[Result]] = [None] * n
        batch = reranker_pb2.RerankBatchRequest()
        sent: List[int] = []
        for i in range(n):
            request = self.to_request(Query(
                corpus, queries[i],
                None if candidates is None else candidates[i], top_k,
                request_id=str(i)))
            if request is None:
                results[i] = _empty_result(str(i))
            else:
                batch.queries.append(request)
                sent.append(i)
        if sent:
            response = self._unary("RerankBatch", self._reranker.RerankBatch,
                                   batch, timeout, retryable=True)
            if len(response.results) != len(sent):
                raise error_for(grpc.StatusCode.INTERNAL,
                                f"{len(response.results)} results for "
                                f"{len(sent)} queries", method="RerankBatch")
            for i, r in zip(sent, response.results):
                results[i] = Result.from_proto(r)
        return results  # type: ignore[return-value]

    def rerank_stream(self, queries: Iterable[Query], *,
                      timeout: Optional[float] = None, ordered: bool = True,
                      return_exceptions: bool = False
                      ) -> Iterator[Union[Result, MaxsimdError]]:
        """Pipelines queries over one bidirectional RerankStream.

        Queries are read from ``queries`` lazily, as gRPC sends them, so a
        producer (a first stage) can feed the stream while results come back.
        Each query's ``request_id`` (its index when empty) matches its
        response; ids must be unique within the stream.

        Args:
            timeout: deadline for the whole stream.
            ordered: yield results in query order (buffering early ones);
                False yields them as they arrive (match by ``request_id``).
            return_exceptions: a query the server (or the client) rejects
                yields its MaxsimdError in its place instead of raising it;
                the stream carries on either way until the caller stops.
        Retries: only when ``queries`` is a Sequence (it can be replayed) and
        the stream failed before any response arrived.
        """
        replayable = isinstance(queries, Sequence)
        if replayable:
            seen: Dict[str, int] = {}
            for i, q in enumerate(queries):  # type: ignore[arg-type]
                rid = q.request_id or str(i)
                if rid in seen:
                    raise invalid_argument(
                        f"queries[{i}] repeats request_id {rid!r} of "
                        f"queries[{seen[rid]}]")
                seen[rid] = i
        return self._stream(queries, self._timeout(timeout), ordered,
                            return_exceptions, replayable)

    def _stream_requests(self, queries: Iterable[Query],
                         state: _StreamState) -> Iterator[Any]:
        # Runs on a gRPC thread: nothing may raise here (gRPC would only log
        # it and cancel the call), so every failure is handed to the reader.
        try:
            yield from self._stream_requests_unguarded(queries, state)
        except Exception as e:  # noqa: BLE001 - the caller's iterator failed
            with state.lock:
                state.error = e

    def _stream_requests_unguarded(self, queries: Iterable[Query],
                                   state: _StreamState) -> Iterator[Any]:
        for index, q in enumerate(queries):
            rid = q.request_id or str(index)
            with state.lock:
                if rid in state.index_of:
                    state.error = invalid_argument(
                        f"query {index} repeats request_id {rid!r} of query "
                        f"{state.index_of[rid]}")
                    return
                state.index_of[rid] = index
            try:
                request = self.to_request(Query(
                    q.corpus, q.query, q.candidates, q.top_k, rid, q.priority))
            except MaxsimdError as e:
                e.method = "RerankStream"
                with state.lock:
                    state.local[index] = e
                continue
            if request is None:
                with state.lock:
                    state.local[index] = _empty_result(rid)
                continue
            with state.lock:
                state.sent += 1
            yield request

    def _stream(self, queries: Iterable[Query], timeout: Optional[float],
                ordered: bool, return_exceptions: bool,
                replayable: bool) -> Iterator[Union[Result, MaxsimdError]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        policy = self.retry_policy
        tries = 0
        while True:
            tries += 1
            state = _StreamState()
            remaining = (None if deadline is None
                         else max(0.0, deadline - time.monotonic()))
            call = self._reranker.RerankStream(
                self._stream_requests(queries, state), timeout=remaining,
                metadata=self._metadata)
            try:
                yield from self._stream_responses(call, state, ordered,
                                                  return_exceptions)
                return
            except grpc.RpcError as e:
                if state.error is not None:
                    raise state.error from None
                code = e.code() if hasattr(e, "code") else None
                wait = policy.backoff(tries - 1, self._rng)
                retry = (replayable and state.received == 0
                         and code in policy.codes
                         and tries < policy.max_attempts
                         and (deadline is None
                              or time.monotonic() + wait < deadline))
                if not retry:
                    raise from_rpc_error(e, method="RerankStream",
                                         attempts=tries) from None
                time.sleep(wait)
            finally:
                call.cancel()  # a no-op once finished; frees an abandoned one

    @staticmethod
    def _stream_responses(call: Any, state: _StreamState, ordered: bool,
                          return_exceptions: bool
                          ) -> Iterator[Union[Result, MaxsimdError]]:
        def emit(item: Union[Result, MaxsimdError]) -> Union[Result,
                                                             MaxsimdError]:
            if isinstance(item, MaxsimdError) and not return_exceptions:
                raise item
            return item

        pending: Dict[int, Union[Result, MaxsimdError]] = {}
        next_index = 0
        for response in call:
            state.received += 1
            with state.lock:
                index = state.index_of.get(response.request_id)
            if index is None:
                raise error_for(grpc.StatusCode.INTERNAL,
                                f"response for unknown request_id "
                                f"{response.request_id!r}",
                                method="RerankStream")
            if response.status_code == 0:
                item: Union[Result, MaxsimdError] = Result.from_proto(response)
            else:
                item = from_status_code(response.status_code,
                                        response.status_message,
                                        method="RerankStream")
            # Local answers of queries sent before this one are recorded by
            # now: the sender records them before it sends the next query.
            local = state.take_local()
            if ordered:
                pending.update(local)
                pending[index] = item
                while next_index in pending:
                    yield emit(pending.pop(next_index))
                    next_index += 1
            else:
                for i in sorted(local):
                    yield emit(local[i])
                yield emit(item)
        pending.update(state.take_local())
        for i in sorted(pending):
            yield emit(pending[i])
        if state.error is not None:
            raise state.error
        if state.received != state.sent:
            raise error_for(grpc.StatusCode.INTERNAL,
                            f"stream closed after {state.received} responses "
                            f"to {state.sent} queries", method="RerankStream")

    # ------------------------------------------------------------------
    # Health

    def health(self, service: str = "", *,
               timeout: Optional[float] = None) -> str:
        """grpc.health.v1 status of ``service`` ("" = the whole server):
        "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN" or "UNKNOWN"."""
        response = self._unary("Health.Check", self._health,
                               _health_request(service), timeout,
                               retryable=True)
        return _HEALTH_STATUS.get(_health_status(response), "UNKNOWN")

    def wait_until_serving(self, timeout: float = 30.0,
                           service: str = "") -> None:
        """Blocks until health reports SERVING (e.g. after start-up, while
        ``--demo_corpus`` corpora load); DeadlineExceededError after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise error_for(grpc.StatusCode.DEADLINE_EXCEEDED,
                                f"{self.target} not SERVING within "
                                f"{timeout} s (last: {last})",
                                method="Health.Check")
            try:
                # wait_for_ready: wait for a connection instead of failing
                # at once while the server is still starting to listen.
                response = self._health(_health_request(service),
                                        timeout=min(remaining, 1.0),
                                        wait_for_ready=True,
                                        metadata=self._metadata)
                last = _HEALTH_STATUS.get(_health_status(response), "UNKNOWN")
                if last == "SERVING":
                    return
            except grpc.RpcError as e:
                last = e.code().name if hasattr(e, "code") else str(e)
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    # ------------------------------------------------------------------
    # Admin: corpora

    def create_corpus(self, name: str, dim: int, *,
                      layout: Union[str, int, None] = None,
                      placement: Union[str, int, None] = None,
                      normalize: bool = False,
                      storage_dtype: Union[str, int, None] = None,
                      quantize_queries: bool = False,
                      plaid_nbits: int = 0, plaid_centroids: int = 0,
                      timeout: Optional[float] = None) -> Any:
        """Creates an empty corpus and returns its ``CorpusInfo``.

        Enums take short names: layout "dense" | "int8" | "plaid", placement
        "auto" | "gpu" | "host", storage_dtype "float16" | "bfloat16" |
        "int8". Not retried: a retry after a lost acknowledgement would
        answer ALREADY_EXISTS for the corpus the first attempt created.
        """
        request = admin_pb2.CreateCorpusRequest(
            name=name, dim=dim,
            layout=_enum(types_pb2.Layout, "LAYOUT_", layout),
            placement=_enum(types_pb2.Placement, "PLACEMENT_", placement),
            normalize=normalize,
            storage_dtype=_enum(types_pb2.DType, "DTYPE_", storage_dtype),
            quantize_queries=quantize_queries, plaid_nbits=plaid_nbits,
            plaid_centroids=plaid_centroids)
        return self._unary("CreateCorpus", self._admin.CreateCorpus, request,
                           timeout, retryable=False)

    def drop_corpus(self, name: str, *,
                    timeout: Optional[float] = None) -> None:
        """Drops a corpus (not retried: a repeat would be NOT_FOUND)."""
        self._unary("DropCorpus", self._admin.DropCorpus,
                    admin_pb2.DropCorpusRequest(name=name), timeout,
                    retryable=False)

    def get_corpus(self, name: str, *, timeout: Optional[float] = None) -> Any:
        """The ``CorpusInfo`` of a corpus or of the corpus an alias names."""
        return self._unary("GetCorpus", self._admin.GetCorpus,
                           admin_pb2.GetCorpusRequest(name=name), timeout,
                           retryable=True)

    def list_corpora(self, *, timeout: Optional[float] = None) -> List[Any]:
        """Every corpus's ``CorpusInfo``, sorted by name."""
        response = self._unary("ListCorpora", self._admin.ListCorpora,
                               admin_pb2.ListCorporaRequest(), timeout,
                               retryable=True)
        return list(response.corpora)

    # ------------------------------------------------------------------
    # Admin: documents

    def add_documents(self, corpus: str, ids: IdsLike,
                      docs: Union[Sequence[Any], Tuple[Any, Any], None] = None,
                      *, tokens: Any = None, cu_seqlens: Any = None,
                      send_dtype: Optional[str] = None,
                      chunk_bytes: int = _MAX_ADD_CHUNK,
                      timeout: Optional[float] = None) -> Any:
        """Adds documents over one AddDocuments stream, committed atomically.

        The documents are either ``docs``, a list of ``[Ld_i, d]`` arrays, or
        ragged: ``tokens`` ``[T, d]`` with ``cu_seqlens`` ``[N + 1]`` (document
        i owns rows ``cu_seqlens[i]:cu_seqlens[i+1]``), also accepted as
        ``docs=(tokens, cu_seqlens)``. The stream's messages carry at most
        ``chunk_bytes`` of tokens each (a document is never split), so a load
        is not capped by the message size and is copied chunk by chunk.

        Returns the ``AddDocumentsResponse`` (``added`` and the corpus after
        the commit). Not retried: after a lost acknowledgement a repeat would
        be ALREADY_EXISTS for every id.
        """
        id_list = id_strings(ids, "ids")
        rows, counts, dim = _document_rows(docs, tokens, cu_seqlens)
        if len(counts) != len(id_list):
            raise invalid_argument(
                f"{len(id_list)} ids for {len(counts)} documents")
        dtype = send_dtype or self.send_dtype
        failure: List[MaxsimdError] = []

        def messages() -> Iterator[Any]:
            # Consumed on a gRPC thread: failures are handed back in `failure`.
            itemsize = 2 if dtype in ("float16", "bfloat16") else 4
            first, size = 0, 0
            if not counts:  # nothing to add: the server answers added = 0
                yield admin_pb2.AddDocumentsRequest(corpus=corpus)
                return
            try:
                for i, count in enumerate(counts):
                    nbytes = count * dim * itemsize
                    if i > first and size + nbytes > chunk_bytes:
                        yield _add_message(corpus, id_list, counts, rows,
                                           first, i, dtype)
                        first, size = i, 0
                    size += nbytes
                yield _add_message(corpus, id_list, counts, rows, first,
                                   len(counts), dtype)
            except MaxsimdError as e:
                failure.append(e)

        try:
            return self._unary("AddDocuments", self._admin.AddDocuments,
                               messages(), timeout, retryable=False)
        except MaxsimdError:
            if failure:
                raise failure[0] from None
            raise

    def delete_documents(self, corpus: str, ids: IdsLike, *,
                         ignore_missing: bool = False,
                         timeout: Optional[float] = None) -> Any:
        """Deletes documents; returns ``DeleteDocumentsResponse``.

        Retried only with ``ignore_missing``: otherwise a repeat after a lost
        acknowledgement fails NOT_FOUND on the ids the first attempt deleted.
        """
        request = admin_pb2.DeleteDocumentsRequest(
            corpus=corpus, ids=id_strings(ids, "ids"),
            ignore_missing=ignore_missing)
        return self._unary("DeleteDocuments", self._admin.DeleteDocuments,
                           request, timeout, retryable=ignore_missing)

    def import_documents(self, corpus: str, *, tokens_npy: str = "",
                         cu_seqlens_npy: str = "", safetensors: str = "",
                         ids: str = "", plaid_dir: str = "",
                         timeout: Optional[float] = None) -> Any:
        """Adds documents the server reads from files under its --files_dir
        (paths relative to it); returns ``AddDocumentsResponse``."""
        request = admin_pb2.ImportDocumentsRequest(
            corpus=corpus, tokens_npy=tokens_npy,
            cu_seqlens_npy=cu_seqlens_npy, safetensors=safetensors, ids=ids,
            plaid_dir=plaid_dir)
        return self._unary("ImportDocuments", self._admin.ImportDocuments,
                           request, timeout, retryable=False)

    # ------------------------------------------------------------------
    # Admin: aliases, snapshots

    def set_alias(self, alias: str, corpus: str, *,
                  timeout: Optional[float] = None) -> str:
        """Points ``alias`` at ``corpus`` atomically; returns the corpus it
        named before ("" if new). Retried: setting the same alias twice
        leaves the same state (a retry may then report ``corpus`` itself as
        the previous one)."""
        response = self._unary("SetAlias", self._admin.SetAlias,
                               admin_pb2.SetAliasRequest(alias=alias,
                                                         corpus=corpus),
                               timeout, retryable=True)
        return response.previous_corpus

    def delete_alias(self, alias: str, *,
                     timeout: Optional[float] = None) -> None:
        """Removes an alias (not retried: a repeat would be NOT_FOUND)."""
        self._unary("DeleteAlias", self._admin.DeleteAlias,
                    admin_pb2.DeleteAliasRequest(alias=alias), timeout,
                    retryable=False)

    def list_aliases(self, *,
                     timeout: Optional[float] = None) -> Dict[str, str]:
        """alias -> corpus."""
        response = self._unary("ListAliases", self._admin.ListAliases,
                               admin_pb2.ListAliasesRequest(), timeout,
                               retryable=True)
        return {a.alias: a.corpus for a in response.aliases}

    def snapshot_corpus(self, name: str, path: str, *,
                        timeout: Optional[float] = None) -> int:
        """Writes the corpus to ``path`` under the server's --files_dir;
        returns the snapshot's document count."""
        response = self._unary("SnapshotCorpus", self._admin.SnapshotCorpus,
                               admin_pb2.SnapshotCorpusRequest(name=name,
                                                               path=path),
                               timeout, retryable=False)
        return response.num_documents

    def load_corpus(self, path: str, name: str = "", *,
                    timeout: Optional[float] = None) -> Any:
        """Loads a corpus directory under --files_dir as a new corpus."""
        return self._unary("LoadCorpus", self._admin.LoadCorpus,
                           admin_pb2.LoadCorpusRequest(path=path, name=name),
                           timeout, retryable=False)

    # ------------------------------------------------------------------
    # Admin: server

    def get_log_level(self, *, timeout: Optional[float] = None) -> str:
        """The server's log level ("trace", "debug", "info", "warn",
        "error", "critical" or "off")."""
        response = self._unary("GetLogLevel", self._admin.GetLogLevel,
                               admin_pb2.GetLogLevelRequest(), timeout,
                               retryable=True)
        return response.level

    def set_log_level(self, level: str, *,
                      timeout: Optional[float] = None) -> str:
        """Sets the server's log level until the next change or a restart;
        returns the level before. An unknown level raises the
        INVALID_ARGUMENT error. Retried: setting a level twice leaves the
        same state."""
        response = self._unary("SetLogLevel", self._admin.SetLogLevel,
                               admin_pb2.SetLogLevelRequest(level=level),
                               timeout, retryable=True)
        return response.previous_level


def _document_rows(docs: Any, tokens: Any, cu_seqlens: Any
                   ) -> Tuple[Any, List[int], int]:
    """Validates documents up front and returns (rows, counts, dim).

    ``rows(first, last)`` gives the token rows of documents [first, last) as
    one array, so that the stream copies one chunk at a time. Checks run here,
    on the caller's thread, where they can raise.
    """
    if isinstance(docs, tuple) and len(docs) == 2 and tokens is None and \
            np.ndim(docs[1]) == 1:
        tokens, cu_seqlens = docs
        docs = None
    if (docs is None) == (tokens is None):
        raise invalid_argument(
            "add_documents takes docs (a list of [Ld, d] arrays) or "
            "tokens with cu_seqlens, not both")
    if docs is not None:
        arrays = [np.asarray(d) for d in docs]
        dims = {a.shape[1] for a in arrays if a.ndim == 2}
        for i, a in enumerate(arrays):
            if a.ndim != 2 or a.dtype.kind not in "fiu":
                raise invalid_argument(
                    f"docs[{i}] has shape {tuple(a.shape)} and dtype "
                    f"{a.dtype}; need a 2-D float array [Ld, d]")
        if len(dims) > 1:
            raise invalid_argument(f"docs have different dims {sorted(dims)}")
        dim = dims.pop() if dims else 0

        def rows(first: int, last: int) -> np.ndarray:
            if last - first == 1:
                return arrays[first]
            dtype = np.result_type(*arrays[first:last])
            return np.concatenate(arrays[first:last]).astype(dtype, copy=False)

        return rows, [a.shape[0] for a in arrays], dim
    if cu_seqlens is None:
        raise invalid_argument("tokens needs cu_seqlens")
    t = np.asarray(tokens)
    cu = np.asarray(cu_seqlens)
    if t.ndim != 2 or t.dtype.kind not in "fiu":
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

    def ragged_rows(first: int, last: int) -> np.ndarray:
        return t[cu[first]:cu[last]]

    return ragged_rows, np.diff(cu).tolist(), t.shape[1]


def _add_message(corpus: str, ids: List[str], counts: List[int], rows: Any,
                 first: int, last: int, dtype: Optional[str]) -> Any:
    return admin_pb2.AddDocumentsRequest(
        corpus=corpus, ids=ids[first:last], token_counts=counts[first:last],
        tokens=encode_tensor(rows(first, last), "tokens", dtype))
