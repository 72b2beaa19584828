"""Bounded retries with exponential backoff and jitter.

Only calls that are safe to repeat are retried (the table is in
client/python/README.md), and only on the codes of ``RetryPolicy.codes``:
UNAVAILABLE by default, which the server answers while it drains and gRPC
answers when no connection can be made. RESOURCE_EXHAUSTED (queue full) is
deliberately not retried by default: retrying an overloaded server makes the
overload worse; add it to ``codes`` where a caller prefers waiting.

A call's timeout bounds all of its attempts together: each attempt gets the
time that is left, and no backoff sleeps past the deadline, so retrying never
makes a call slower than the deadline its caller asked for.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, FrozenSet, Optional, TypeVar

import grpc

from maxsimd.errors import MaxsimdError, from_rpc_error

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """When and how often a failed call is tried again.

    Attributes:
        max_attempts: tries in all, the first included (1 = never retry).
        initial_backoff: seconds before the first retry, before jitter.
        max_backoff: cap on any one wait, before jitter.
        multiplier: growth of the wait from one retry to the next.
        jitter: fraction of each wait that is random, in [0, 1]; 1.0 is "full
            jitter" (a wait uniform in (0, backoff]), which spreads the retries
            of many clients that failed together, such as when a server
            restarts.
        codes: status codes that are retried.
    """

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0
    jitter: float = 1.0
    codes: FrozenSet[grpc.StatusCode] = field(
        default_factory=lambda: frozenset({grpc.StatusCode.UNAVAILABLE}))

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts is {self.max_attempts}; need >= 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter is {self.jitter}; need 0 <= jitter <= 1")
        if self.initial_backoff < 0 or self.max_backoff < 0:
            raise ValueError("backoffs must be >= 0")

    def backoff(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (0 = the first)."""
        base = min(self.max_backoff,
                   self.initial_backoff * self.multiplier ** retry)
        return base * (1.0 - self.jitter * rng.random())


def retry_wait(policy: RetryPolicy, error: grpc.RpcError, tries: int,
               deadline: Optional[float], retryable: bool,
               rng: random.Random) -> Optional[float]:
    """Seconds to wait before trying again after attempt ``tries`` failed
    with ``error``, or None to give up. ``deadline`` is on
    ``time.monotonic()``'s clock (None: no deadline). Shared by the
    blocking and the asyncio retry loops, so that both decide alike."""
    code = error.code() if hasattr(error, "code") else None
    if not retryable or code not in policy.codes or \
            tries >= policy.max_attempts:
        return None
    wait = policy.backoff(tries - 1, rng)
    if deadline is not None and time.monotonic() + wait >= deadline:
        return None
    return wait


def remaining(deadline: Optional[float]) -> Optional[float]:
    """The time left to ``deadline`` (None: no deadline), never negative.

    A spent deadline is still handed to gRPC, which answers
    DEADLINE_EXCEEDED itself, so that the error looks the same whichever
    side noticed.
    """
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())


def call_with_retry(attempt: Callable[[Optional[float]], T], *,
                    method: str, policy: RetryPolicy,
                    timeout: Optional[float], retryable: bool = True,
                    rng: Optional[random.Random] = None,
                    sleep: Callable[[float], None] = time.sleep) -> T:
    """Runs ``attempt(remaining_timeout)`` until it succeeds or may not retry.

    ``attempt`` performs one gRPC call with the given timeout in seconds (None:
    no deadline) and raises ``grpc.RpcError`` on failure. Raises a
    ``MaxsimdError`` carrying the last attempt's code and message.
    ``retryable=False`` makes exactly one attempt (non-idempotent writes).
    """
    rng = rng or random.Random()
    deadline = None if timeout is None else time.monotonic() + timeout
    tries = 0
    while True:
        tries += 1
        try:
            return attempt(remaining(deadline))
        except grpc.RpcError as e:
            wait = retry_wait(policy, e, tries, deadline, retryable, rng)
            if wait is None:
                raise from_rpc_error(e, method=method,
                                     attempts=tries) from None
            sleep(wait)


async def call_with_retry_async(
        attempt: Callable[[Optional[float]], Awaitable[T]], *, method: str,
        policy: RetryPolicy, timeout: Optional[float], retryable: bool = True,
        rng: Optional[random.Random] = None) -> T:
    """``call_with_retry`` for grpc.aio: ``attempt`` returns an awaitable
    and the backoff is an ``asyncio.sleep``, so other tasks run meanwhile."""
    rng = rng or random.Random()
    deadline = None if timeout is None else time.monotonic() + timeout
    tries = 0
    while True:
        tries += 1
        try:
            return await attempt(remaining(deadline))
        except grpc.RpcError as e:
            wait = retry_wait(policy, e, tries, deadline, retryable, rng)
            if wait is None:
                raise from_rpc_error(e, method=method,
                                     attempts=tries) from None
            await asyncio.sleep(wait)


__all__ = ["MaxsimdError", "RetryPolicy", "call_with_retry",
           "call_with_retry_async", "remaining", "retry_wait"]
