"""``AsyncClient``: the ``Client`` API for asyncio, over ``grpc.aio``.

Every method of ``Client`` is here with the same arguments and results, as a
coroutine (``rerank_stream`` returns an async iterator; ``to_request`` is the
same plain function): each names the same entry of the call table in
``maxsimd._calls``, which builds the request, parses the answer and says
whether the call is retried, and calls are retried by the same rules
(``maxsimd.retry``), with ``asyncio.sleep`` between attempts.

    async with maxsimd.AsyncClient("127.0.0.1:50051") as client:
        results = await asyncio.gather(*(
            client.rerank("docs", q, candidates=c) for q, c in work))

Thread-safety: an AsyncClient belongs to the event loop it was created in
(gRPC's rule for aio channels); create one per loop. Many tasks of that loop
may call it at once: its channel multiplexes their calls.
"""

from __future__ import annotations

import asyncio
from typing import (Any, AsyncIterable, AsyncIterator, Dict, Iterable, List,
                    Optional, Sequence, Tuple, TypeVar, Union)

import grpc
import grpc.aio

from maxsimd import _calls as calls
from maxsimd._base import ClientBase, ServingWait, StreamAttempts
from maxsimd._calls import (MAX_ADD_CHUNK, StreamItem, check_stream_queries,
                            emit, health_request)
from maxsimd.results import (AddResult, CorpusInfo, DeleteResult, IdsLike,
                             Query, Result)
from maxsimd.retry import call_with_retry_async

__all__ = ["AsyncClient"]

R = TypeVar("R")


class AsyncClient(ClientBase):
    """A maxsimd client for one target, for asyncio.

    Takes the arguments of ``Client`` (see there), except that
    ``interceptors`` are ``grpc.aio.ClientInterceptor`` objects. The channel
    has the same options, message limits included (64 MiB by default, the
    server's ``--max_message_bytes`` default, instead of gRPC's 4 MiB
    receive limit).
    """

    def _open_channel(self, target: str,
                      credentials: Optional[grpc.ChannelCredentials],
                      options: List[Tuple[str, Any]],
                      interceptors: List[Any]) -> Tuple[Any, Any]:
        if credentials is not None:
            channel = grpc.aio.secure_channel(
                target, credentials, options,
                interceptors=interceptors or None)
        else:
            channel = grpc.aio.insecure_channel(
                target, options, interceptors=interceptors or None)
        return channel, channel

    # ------------------------------------------------------------------
    # Lifetime

    async def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ------------------------------------------------------------------
    # Plumbing

    async def _call(self, call: calls.Call[R], timeout: Optional[float],
                    *args: Any, **kwargs: Any) -> R:
        """``Client._call``, awaited."""
        prepared = call.prepare(self, *args, **kwargs)
        request = prepared.request
        if request is None:
            return prepared.finish(None)
        rpc = self._rpc(call)

        async def attempt(left: Optional[float]) -> Any:
            return await rpc(request, timeout=left, metadata=self._metadata)

        return prepared.finish(await call_with_retry_async(
            attempt, method=call.method, policy=self.retry_policy,
            timeout=self._timeout(timeout), retryable=call.retries(request),
            rng=self._rng))

    # ------------------------------------------------------------------
    # Reranker

    async def rerank(self, corpus: str, query: Any,
                     candidates: Optional[IdsLike] = None, *, top_k: int = 10,
                     request_id: str = "", priority: int = 0,
                     timeout: Optional[float] = None) -> Result:
        """``Client.rerank``."""
        return await self._call(calls.RERANK, timeout, Query(
            corpus, query, candidates, top_k, request_id, priority))

    async def rerank_batch(
            self, corpus: str, queries: Any,
            candidates: Optional[Sequence[Optional[IdsLike]]] = None, *,
            top_k: int = 10, timeout: Optional[float] = None) -> List[Result]:
        """``Client.rerank_batch``."""
        return await self._call(calls.RERANK_BATCH, timeout, corpus, queries,
                                candidates, top_k)

    def rerank_stream(
            self, queries: Union[Iterable[Query], AsyncIterable[Query]], *,
            timeout: Optional[float] = None, ordered: bool = True,
            return_exceptions: bool = False) -> AsyncIterator[StreamItem]:
        """``Client.rerank_stream`` as an async iterator:
        ``async for result in client.rerank_stream(queries)``.

        ``queries`` may also be an async iterable (e.g. an async generator
        fed by a first stage); like any other iterator it is not replayed,
        so only a Sequence is retried.
        """
        replayable = (not isinstance(queries, AsyncIterable)
                      and check_stream_queries(queries))
        return self._stream(queries, StreamAttempts(
            self, self._timeout(timeout), ordered, replayable),
            return_exceptions)

    async def _stream(self, queries: Union[Iterable[Query],
                                           AsyncIterable[Query]],
                      attempts: StreamAttempts, return_exceptions: bool
                      ) -> AsyncIterator[StreamItem]:
        rpc = self._stubs["Reranker"].RerankStream
        while True:
            state, collator = attempts.start()
            call = rpc(state.requests_async(queries),
                       timeout=attempts.time_left(), metadata=self._metadata)
            try:
                async for response in call:
                    for item in collator.on_response(response):
                        yield emit(item, return_exceptions)
                for item in collator.on_end():
                    yield emit(item, return_exceptions)
                collator.check_end()
                return
            except grpc.RpcError as e:
                await asyncio.sleep(attempts.wait_after(e))
            finally:
                call.cancel()  # a no-op once finished; frees an abandoned one

    # ------------------------------------------------------------------
    # Health

    async def health(self, service: str = "", *,
                     timeout: Optional[float] = None) -> str:
        """``Client.health``."""
        return await self._call(calls.HEALTH, timeout, service)

    async def wait_until_serving(self, timeout: float = 30.0,
                                 service: str = "") -> None:
        """``Client.wait_until_serving``, without blocking the loop."""
        wait, check = ServingWait(self.target, timeout), \
            self._rpc(calls.HEALTH)
        while True:
            try:
                if wait.serving(await check(
                        health_request(service),
                        timeout=wait.attempt_timeout(), wait_for_ready=True,
                        metadata=self._metadata)):
                    return
            except grpc.RpcError as e:
                wait.failed(e)
            await asyncio.sleep(wait.pause())

    # ------------------------------------------------------------------
    # Admin: corpora

    async def create_corpus(self, name: str, dim: int, *,
                            layout: Union[str, int, None] = None,
                            placement: Union[str, int, None] = None,
                            normalize: bool = False,
                            storage_dtype: Union[str, int, None] = None,
                            quantize_queries: Optional[bool] = None,
                            plaid_nbits: int = 0, plaid_centroids: int = 0,
                            pool_factor: int = 1,
                            timeout: Optional[float] = None) -> CorpusInfo:
        """``Client.create_corpus`` (not retried)."""
        return await self._call(calls.CREATE_CORPUS, timeout, name, dim,
                                layout, placement, normalize, storage_dtype,
                                quantize_queries, plaid_nbits,
                                plaid_centroids, pool_factor)

    async def drop_corpus(self, name: str, *,
                          timeout: Optional[float] = None) -> None:
        """``Client.drop_corpus`` (not retried)."""
        return await self._call(calls.DROP_CORPUS, timeout, name)

    async def get_corpus(self, name: str, *,
                         timeout: Optional[float] = None) -> CorpusInfo:
        """``Client.get_corpus``."""
        return await self._call(calls.GET_CORPUS, timeout, name)

    async def list_corpora(self, *, timeout: Optional[float] = None
                           ) -> List[CorpusInfo]:
        """``Client.list_corpora``."""
        return await self._call(calls.LIST_CORPORA, timeout)

    # ------------------------------------------------------------------
    # Admin: documents

    async def add_documents(
            self, corpus: str, ids: IdsLike,
            docs: Union[Sequence[Any], Tuple[Any, Any], Any] = None, *,
            tokens: Any = None, cu_seqlens: Any = None,
            send_dtype: Optional[str] = None,
            chunk_bytes: int = MAX_ADD_CHUNK,
            timeout: Optional[float] = None) -> AddResult:
        """``Client.add_documents`` (not retried). The inputs are converted
        before the call; each message is encoded in the event loop as gRPC
        sends it."""
        return await self._call(calls.ADD_DOCUMENTS, timeout, corpus, ids,
                                docs, tokens, cu_seqlens, send_dtype,
                                chunk_bytes)

    async def delete_documents(self, corpus: str, ids: IdsLike, *,
                               ignore_missing: bool = False,
                               timeout: Optional[float] = None
                               ) -> DeleteResult:
        """``Client.delete_documents`` (retried with ignore_missing only)."""
        return await self._call(calls.DELETE_DOCUMENTS, timeout, corpus, ids,
                                ignore_missing)

    async def import_documents(self, corpus: str, *, tokens_npy: str = "",
                               cu_seqlens_npy: str = "", safetensors: str = "",
                               ids: str = "", plaid_dir: str = "",
                               timeout: Optional[float] = None) -> AddResult:
        """``Client.import_documents`` (not retried)."""
        return await self._call(calls.IMPORT_DOCUMENTS, timeout, corpus,
                                tokens_npy, cu_seqlens_npy, safetensors, ids,
                                plaid_dir)

    # ------------------------------------------------------------------
    # Admin: aliases, snapshots

    async def set_alias(self, alias: str, corpus: str, *,
                        timeout: Optional[float] = None) -> str:
        """``Client.set_alias``: the corpus the alias named before."""
        return await self._call(calls.SET_ALIAS, timeout, alias, corpus)

    async def delete_alias(self, alias: str, *,
                           timeout: Optional[float] = None) -> None:
        """``Client.delete_alias`` (not retried)."""
        return await self._call(calls.DELETE_ALIAS, timeout, alias)

    async def list_aliases(self, *, timeout: Optional[float] = None
                           ) -> Dict[str, str]:
        """``Client.list_aliases``: alias -> corpus."""
        return await self._call(calls.LIST_ALIASES, timeout)

    async def snapshot_corpus(self, name: str, path: str, *,
                              timeout: Optional[float] = None) -> int:
        """``Client.snapshot_corpus``: the snapshot's document count."""
        return await self._call(calls.SNAPSHOT_CORPUS, timeout, name, path)

    async def load_corpus(self, path: str, name: str = "", *,
                          timeout: Optional[float] = None) -> CorpusInfo:
        """``Client.load_corpus`` (not retried)."""
        return await self._call(calls.LOAD_CORPUS, timeout, path, name)

    # ------------------------------------------------------------------
    # Admin: server

    async def get_log_level(self, *,
                            timeout: Optional[float] = None) -> str:
        """``Client.get_log_level``."""
        return await self._call(calls.GET_LOG_LEVEL, timeout)

    async def set_log_level(self, level: str, *,
                            timeout: Optional[float] = None) -> str:
        """``Client.set_log_level``: the level before."""
        return await self._call(calls.SET_LOG_LEVEL, timeout, level)
