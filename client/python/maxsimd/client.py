"""``Client``: one maxsimd endpoint (a server, or the replicas behind a name).

Thread-safety: a Client may be shared by many threads. It holds one gRPC
channel, which multiplexes concurrent calls over its connections, and the
generated stubs, which are thread-safe. Iterators returned by
``rerank_stream`` belong to the thread that consumes them.

Retries (see ``maxsimd.retry``): calls that are safe to repeat are retried on
UNAVAILABLE with exponential backoff and jitter, within the call's deadline.
Writes whose repetition could change the outcome after a lost acknowledgement
are tried once; which call is which is decided in one place, the call table
of ``maxsimd._calls``, and client/python/README.md gives the reasons.

Each method names its entry of that table, which builds the request and
parses the answer for the asyncio client (``maxsimd.aio``) too; this module
adds blocking calls.
"""

from __future__ import annotations

import time
from typing import (Any, Dict, Iterable, Iterator, List, Optional, Sequence,
                    Tuple, TypeVar, Union)

import grpc

from maxsimd import _calls as calls
from maxsimd._base import ClientBase, ServingWait, StreamAttempts
from maxsimd._calls import (DEFAULT_MAX_MESSAGE_BYTES, MAX_ADD_CHUNK,
                            PemLike, StreamItem, TlsOptions,
                            check_stream_queries, emit, health_request)
from maxsimd.results import (AddResult, CorpusInfo, DeleteResult, IdsLike,
                             Query, Result)
from maxsimd.retry import call_with_retry

__all__ = ["Client", "DEFAULT_MAX_MESSAGE_BYTES", "PemLike", "TlsOptions"]

R = TypeVar("R")


class Client(ClientBase):
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
        max_message_bytes: largest message sent or received (the channel's
            ``grpc.max_send_message_length`` and
            ``grpc.max_receive_message_length``; -1 for no limit). The
            default is the server's ``--max_message_bytes`` default, 64 MiB,
            instead of gRPC's 4 MiB receive limit; set it to the server's
            flag where that differs. ``add_documents`` cuts its messages to
            the send limit.
        send_dtype: wire dtype of embeddings: None (16-bit and narrower
            float input as 16 bits, everything else float32), "float32",
            "float16" or "bfloat16".
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
            client's own (including the message limits).
    """

    def _open_channel(self, target: str,
                      credentials: Optional[grpc.ChannelCredentials],
                      options: List[Tuple[str, Any]],
                      interceptors: List[Any]) -> Tuple[Any, Any]:
        if credentials is not None:
            channel = grpc.secure_channel(target, credentials, options)
        else:
            channel = grpc.insecure_channel(target, options)
        if interceptors:
            return channel, grpc.intercept_channel(channel, *interceptors)
        return channel, channel

    # ------------------------------------------------------------------
    # Lifetime

    def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------
    # Plumbing

    def _call(self, call: calls.Call[R], timeout: Optional[float],
              *args: Any, **kwargs: Any) -> R:
        """Makes ``call`` with the method's arguments, retried as its table
        entry allows, within ``timeout`` (retries included)."""
        prepared = call.prepare(self, *args, **kwargs)
        request = prepared.request
        if request is None:
            return prepared.finish(None)
        rpc = self._rpc(call)

        def attempt(left: Optional[float]) -> Any:
            return rpc(request, timeout=left, metadata=self._metadata)

        return prepared.finish(call_with_retry(
            attempt, method=call.method, policy=self.retry_policy,
            timeout=self._timeout(timeout), retryable=call.retries(request),
            rng=self._rng))

    # ------------------------------------------------------------------
    # Reranker

    def rerank(self, corpus: str, query: Any,
               candidates: Optional[IdsLike] = None, *, top_k: int = 10,
               request_id: str = "", priority: int = 0,
               timeout: Optional[float] = None) -> Result:
        """Ranks ``candidates`` (None: the whole corpus) for one query.

        Args:
            corpus: corpus name or alias.
            query: ``[Lq, d]`` token embeddings: a numpy array or a torch
                tensor (see README.md, "Inputs", for the dtypes), on any
                device, or nested lists.
            candidates: document ids (ints or strings; a list, numpy array
                or integer tensor); None scans the corpus; an empty list
                returns an empty result without a call.
            top_k: documents to return (fewer when fewer are ranked).
            timeout: deadline in seconds for the call, retries included.
        Raises:
            MaxsimdError (a subclass per code): INVALID_ARGUMENT for a bad
            query, NOT_FOUND for an unknown corpus or candidate, ...
        """
        return self._call(calls.RERANK, timeout, Query(
            corpus, query, candidates, top_k, request_id, priority))

    def rerank_batch(self, corpus: str, queries: Any,
                     candidates: Optional[Sequence[Optional[IdsLike]]] = None,
                     *, top_k: int = 10,
                     timeout: Optional[float] = None) -> List[Result]:
        """Ranks several queries in one RerankBatch message, in order.

        Args:
            queries: a sequence of ``[Lq_i, d]`` arrays or tensors, or one
                ``[B, Lq, d]`` array or tensor.
            candidates: None to scan for every query, or one entry per query
                (None for a scan of that query).
        The server validates the batch as a whole: one bad query fails the
        call. At most the server's ``--max_batch_queries`` queries.
        """
        return self._call(calls.RERANK_BATCH, timeout, corpus, queries,
                          candidates, top_k)

    def rerank_stream(self, queries: Iterable[Query], *,
                      timeout: Optional[float] = None, ordered: bool = True,
                      return_exceptions: bool = False
                      ) -> Iterator[StreamItem]:
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
        replayable = check_stream_queries(queries)
        return self._stream(queries, StreamAttempts(
            self, self._timeout(timeout), ordered, replayable),
            return_exceptions)

    def _stream(self, queries: Iterable[Query], attempts: StreamAttempts,
                return_exceptions: bool) -> Iterator[StreamItem]:
        rpc = self._stubs["Reranker"].RerankStream
        while True:
            state, collator = attempts.start()
            call = rpc(state.requests(queries), timeout=attempts.time_left(),
                       metadata=self._metadata)
            try:
                for response in call:
                    for item in collator.on_response(response):
                        yield emit(item, return_exceptions)
                for item in collator.on_end():
                    yield emit(item, return_exceptions)
                collator.check_end()
                return
            except grpc.RpcError as e:
                time.sleep(attempts.wait_after(e))
            finally:
                call.cancel()  # a no-op once finished; frees an abandoned one

    # ------------------------------------------------------------------
    # Health

    def health(self, service: str = "", *,
               timeout: Optional[float] = None) -> str:
        """grpc.health.v1 status of ``service`` ("" = the whole server):
        "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN" or "UNKNOWN"."""
        return self._call(calls.HEALTH, timeout, service)

    def wait_until_serving(self, timeout: float = 30.0,
                           service: str = "") -> None:
        """Blocks until health reports SERVING (e.g. after start-up, while
        ``--demo_corpus`` corpora load); DeadlineExceededError after
        ``timeout`` seconds."""
        wait, check = ServingWait(self.target, timeout), \
            self._rpc(calls.HEALTH)
        while True:
            try:
                # wait_for_ready: wait for a connection instead of failing
                # at once while the server is still starting to listen.
                if wait.serving(check(
                        health_request(service),
                        timeout=wait.attempt_timeout(), wait_for_ready=True,
                        metadata=self._metadata)):
                    return
            except grpc.RpcError as e:
                wait.failed(e)
            time.sleep(wait.pause())

    # ------------------------------------------------------------------
    # Admin: corpora

    def create_corpus(self, name: str, dim: int, *,
                      layout: Union[str, int, None] = None,
                      placement: Union[str, int, None] = None,
                      normalize: bool = False,
                      storage_dtype: Union[str, int, None] = None,
                      quantize_queries: Optional[bool] = None,
                      plaid_nbits: int = 0, plaid_centroids: int = 0,
                      pool_factor: int = 1,
                      timeout: Optional[float] = None) -> CorpusInfo:
        """Creates an empty corpus and returns its ``CorpusInfo``.

        Enums take short names: layout "dense" | "int8" | "plaid", placement
        "auto" | "gpu" | "host", storage_dtype "float16" | "bfloat16" |
        "int8". ``quantize_queries`` (int8 corpora) left None takes the
        server's choice (quantised where its backend scores them faster). ``pool_factor`` above 1 pools each added
        document's n tokens into ceil(n / pool_factor) cluster means. Not
        retried: a retry after a lost acknowledgement would
        answer ALREADY_EXISTS for the corpus the first attempt created.
        """
        return self._call(calls.CREATE_CORPUS, timeout, name, dim, layout,
                          placement, normalize, storage_dtype,
                          quantize_queries, plaid_nbits, plaid_centroids,
                          pool_factor)

    def drop_corpus(self, name: str, *,
                    timeout: Optional[float] = None) -> None:
        """Drops a corpus (not retried: a repeat would be NOT_FOUND)."""
        return self._call(calls.DROP_CORPUS, timeout, name)

    def get_corpus(self, name: str, *,
                   timeout: Optional[float] = None) -> CorpusInfo:
        """The ``CorpusInfo`` of a corpus or of the corpus an alias names."""
        return self._call(calls.GET_CORPUS, timeout, name)

    def list_corpora(self, *,
                     timeout: Optional[float] = None) -> List[CorpusInfo]:
        """Every corpus's ``CorpusInfo``, sorted by name."""
        return self._call(calls.LIST_CORPORA, timeout)

    # ------------------------------------------------------------------
    # Admin: documents

    def add_documents(self, corpus: str, ids: IdsLike,
                      docs: Union[Sequence[Any], Tuple[Any, Any], Any] = None,
                      *, tokens: Any = None, cu_seqlens: Any = None,
                      send_dtype: Optional[str] = None,
                      chunk_bytes: int = MAX_ADD_CHUNK,
                      timeout: Optional[float] = None) -> AddResult:
        """Adds documents over one AddDocuments stream, committed atomically.

        The documents are either ``docs``, a list of ``[Ld_i, d]`` arrays or
        tensors (or one ``[N, Ld, d]`` array or tensor), or ragged:
        ``tokens`` ``[T, d]`` with ``cu_seqlens`` ``[N + 1]`` (document i owns
        rows ``cu_seqlens[i]:cu_seqlens[i+1]``), also accepted as
        ``docs=(tokens, cu_seqlens)``.

        The stream's messages carry whole documents, about ``chunk_bytes``
        of tokens each and never more than the client's send limit
        (``max_message_bytes``), so a load is not capped by the message
        size. A document too large for one message is refused
        (InvalidArgumentError, a ValueError, naming it and the limit)
        before anything is sent. The inputs are converted to numpy before
        the call (a GPU tensor is copied to the host once); each message is
        encoded as it is sent.

        Returns an ``AddResult`` (``added`` and the corpus after the
        commit). Not retried: after a lost acknowledgement a repeat would be
        ALREADY_EXISTS for every id.
        """
        return self._call(calls.ADD_DOCUMENTS, timeout, corpus, ids, docs,
                          tokens, cu_seqlens, send_dtype, chunk_bytes)

    def delete_documents(self, corpus: str, ids: IdsLike, *,
                         ignore_missing: bool = False,
                         timeout: Optional[float] = None) -> DeleteResult:
        """Deletes documents; returns a ``DeleteResult`` (deleted, missing).

        Retried only with ``ignore_missing``: otherwise a repeat after a lost
        acknowledgement fails NOT_FOUND on the ids the first attempt deleted.
        """
        return self._call(calls.DELETE_DOCUMENTS, timeout, corpus, ids,
                          ignore_missing)

    def import_documents(self, corpus: str, *, tokens_npy: str = "",
                         cu_seqlens_npy: str = "", safetensors: str = "",
                         ids: str = "", plaid_dir: str = "",
                         timeout: Optional[float] = None) -> AddResult:
        """Adds documents the server reads from files under its --files_dir
        (paths relative to it); returns an ``AddResult``. Not retried."""
        return self._call(calls.IMPORT_DOCUMENTS, timeout, corpus,
                          tokens_npy, cu_seqlens_npy, safetensors, ids,
                          plaid_dir)

    # ------------------------------------------------------------------
    # Admin: aliases, snapshots

    def set_alias(self, alias: str, corpus: str, *,
                  timeout: Optional[float] = None) -> str:
        """Points ``alias`` at ``corpus`` atomically; returns the corpus it
        named before ("" if new). Retried: setting the same alias twice
        leaves the same state (a retry may then report ``corpus`` itself as
        the previous one)."""
        return self._call(calls.SET_ALIAS, timeout, alias, corpus)

    def delete_alias(self, alias: str, *,
                     timeout: Optional[float] = None) -> None:
        """Removes an alias (not retried: a repeat would be NOT_FOUND)."""
        return self._call(calls.DELETE_ALIAS, timeout, alias)

    def list_aliases(self, *,
                     timeout: Optional[float] = None) -> Dict[str, str]:
        """alias -> corpus."""
        return self._call(calls.LIST_ALIASES, timeout)

    def snapshot_corpus(self, name: str, path: str, *,
                        timeout: Optional[float] = None) -> int:
        """Writes the corpus to ``path`` under the server's --files_dir;
        returns the snapshot's document count. Not retried."""
        return self._call(calls.SNAPSHOT_CORPUS, timeout, name, path)

    def load_corpus(self, path: str, name: str = "", *,
                    timeout: Optional[float] = None) -> CorpusInfo:
        """Loads a corpus directory under --files_dir as a new corpus
        (``name``, or the name its manifest records). Not retried."""
        return self._call(calls.LOAD_CORPUS, timeout, path, name)

    # ------------------------------------------------------------------
    # Admin: server

    def get_log_level(self, *, timeout: Optional[float] = None) -> str:
        """The server's log level ("trace", "debug", "info", "warn",
        "error", "critical" or "off")."""
        return self._call(calls.GET_LOG_LEVEL, timeout)

    def set_log_level(self, level: str, *,
                      timeout: Optional[float] = None) -> str:
        """Sets the server's log level until the next change or a restart;
        returns the level before. An unknown level raises the
        INVALID_ARGUMENT error. Retried: setting a level twice leaves the
        same state."""
        return self._call(calls.SET_LOG_LEVEL, timeout, level)
