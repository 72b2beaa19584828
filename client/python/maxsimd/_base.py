"""``ClientBase``: what ``Client`` and ``AsyncClient`` share besides the
requests and answers of ``maxsimd._calls``.

One constructor (the arguments ``Client`` documents), the channel's options
and limits, the stubs, the per-call deadline rule, and the bookkeeping of the
two loops that the clients run in their own way (blocking or awaited):
``wait_until_serving``'s polling (``ServingWait``) and ``rerank_stream``'s
retries (``StreamAttempts``). A subclass adds only how a channel is opened
and how an attempt is made.

Thread-safety: a ``ClientBase``'s fields are set by its constructor and only
read afterwards. A ``ServingWait`` or ``StreamAttempts`` belongs to one call.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import grpc

from maxsimd._calls import (DEFAULT_MAX_MESSAGE_BYTES, HEALTH_CHECK, Call,
                            StreamCollator, StreamState, TlsOptions,
                            build_channel_options, call_metadata,
                            health_status, rerank_request, tls_options)
from maxsimd._encode import check_send_dtype
from maxsimd._pb import admin_pb2_grpc, reranker_pb2_grpc
from maxsimd.errors import error_for, from_rpc_error
from maxsimd.results import Query
from maxsimd.retry import RetryPolicy, remaining, retry_wait

class _HealthStub:
    """grpc.health.v1.Health with its one method, on raw bytes (see
    ``maxsimd._calls.health_request``)."""

    def __init__(self, channel: Any) -> None:
        self.Check = channel.unary_unary(HEALTH_CHECK)  # noqa: N815


class ClientBase:
    """The configuration, channel and stubs of a client for one target.

    The arguments are ``Client``'s (documented there). Subclasses implement
    ``_open_channel``; ``interceptors`` are of the kind their channel takes.
    """

    def __init__(self, target: str, *,
                 tls: Union[TlsOptions, bool, None] = None,
                 default_timeout: Optional[float] = 30.0,
                 max_retries: int = 3,
                 backoff: float = 0.1,
                 max_backoff: float = 2.0,
                 retry_policy: Optional[RetryPolicy] = None,
                 lb_policy: Optional[str] = "round_robin",
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 send_dtype: Optional[str] = None,
                 token: Optional[str] = None,
                 metadata: Sequence[Tuple[str, str]] = (),
                 interceptors: Sequence[Any] = (),
                 channel_options: Sequence[Tuple[str, Any]] = ()) -> None:
        check_send_dtype(send_dtype)
        self.target = target
        self.default_timeout = default_timeout
        self.retry_policy = retry_policy or RetryPolicy(
            max_attempts=max_retries + 1, initial_backoff=backoff,
            max_backoff=max_backoff)
        self.send_dtype = send_dtype
        self._metadata = call_metadata(token, metadata)
        self._rng = random.Random()

        tls_opts = tls_options(tls)
        options = build_channel_options(self.retry_policy, lb_policy,
                                        max_message_bytes, tls_opts,
                                        channel_options)
        # The send limit in force (channel_options may have overridden it):
        # add_documents cuts its messages to fit it. Negative: none.
        send_limit = int(dict(options)["grpc.max_send_message_length"])
        self.max_send_bytes: Optional[int] = \
            send_limit if send_limit >= 0 else None
        self._channel, channel = self._open_channel(
            target, None if tls_opts is None else tls_opts.credentials(),
            options, list(interceptors))
        self._stubs: Dict[str, Any] = {
            "Reranker": reranker_pb2_grpc.RerankerStub(channel),
            "Admin": admin_pb2_grpc.AdminStub(channel),
            "Health": _HealthStub(channel),
        }

    def _open_channel(self, target: str,
                      credentials: Optional[grpc.ChannelCredentials],
                      options: List[Tuple[str, Any]],
                      interceptors: List[Any]) -> Tuple[Any, Any]:
        """Opens the channel: (the channel to close, the channel the stubs
        call through, with the interceptors)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"maxsimd.{type(self).__name__}({self.target!r})"

    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        """A call's deadline in seconds: ``timeout``, else the default; None
        for none (None or ``math.inf``)."""
        t = self.default_timeout if timeout is None else timeout
        return None if t is None or math.isinf(t) else t

    def _rpc(self, call: Call[Any]) -> Any:
        """The stub's multi-callable for ``call``."""
        return getattr(self._stubs[call.service], call.rpc)

    def to_request(self, query: Query) -> Optional[Any]:
        """The RerankRequest for ``query``; None for an empty candidate list.

        An empty ``candidate_ids`` means "scan the whole corpus" on the wire,
        so a query whose first stage found nothing must not be sent: the
        callers answer it locally with an empty result.
        """
        return rerank_request(query, self.send_dtype)


class ServingWait:
    """``wait_until_serving``'s polling: health checks of at most 1 s each
    (waiting for a connection), 50 ms apart, until SERVING or ``timeout``
    seconds, then DeadlineExceededError naming the last answer."""

    def __init__(self, target: str, timeout: float) -> None:
        self.target = target
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.last = "no answer"

    def attempt_timeout(self) -> float:
        """The next check's timeout; raises once the time is spent."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise error_for(grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"{self.target} not SERVING within "
                            f"{self.timeout} s (last: {self.last})",
                            method="Health.Check")
        return min(left, 1.0)

    def serving(self, response: bytes) -> bool:
        self.last = health_status(response)
        return self.last == "SERVING"

    def failed(self, error: grpc.RpcError) -> None:
        self.last = error.code().name if hasattr(error, "code") else \
            str(error)

    def pause(self) -> float:
        """Seconds to sleep before the next check."""
        return min(0.05, max(0.0, self.deadline - time.monotonic()))


class StreamAttempts:
    """The attempts of one ``rerank_stream`` call: each gets a fresh
    ``StreamState`` and ``StreamCollator``, and a failed one is retried only
    when ``replayable`` (the queries are a Sequence) and no response has
    arrived (results already yielded cannot be taken back)."""

    def __init__(self, client: ClientBase, timeout: Optional[float],
                 ordered: bool, replayable: bool) -> None:
        self.client = client
        self.ordered = ordered
        self.replayable = replayable
        self.deadline = None if timeout is None else \
            time.monotonic() + timeout
        self.tries = 0
        self.state = StreamState(client.send_dtype)

    def start(self) -> Tuple[StreamState, StreamCollator]:
        """The state and collator of the next attempt."""
        self.tries += 1
        self.state = StreamState(self.client.send_dtype)
        return self.state, StreamCollator(self.state, self.ordered)

    def time_left(self) -> Optional[float]:
        return remaining(self.deadline)

    def wait_after(self, error: grpc.RpcError) -> float:
        """Seconds to wait before the next attempt, after ``error``; raises
        what ends the stream instead (the caller's iterator's own failure,
        or the error as a MaxsimdError)."""
        state = self.state
        if state.error is not None:
            raise state.error from None
        wait = retry_wait(self.client.retry_policy, error, self.tries,
                          self.deadline,
                          self.replayable and state.received == 0,
                          self.client._rng)
        if wait is None:
            raise from_rpc_error(error, method="RerankStream",
                                 attempts=self.tries) from None
        return wait
