"""Exceptions that carry the gRPC status code and message of a failed call.

Every error the client raises for a call is a ``MaxsimdError`` with ``code``
(a ``grpc.StatusCode``) and ``details`` (the server's message, which names
the field and the limit for a bad request). The common codes have their own
subclasses so that callers can write ``except maxsimd.NotFoundError``. A bad
argument caught on the client side, before any call, is the same
``InvalidArgumentError`` the server would have answered, and it is also a
``ValueError``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Type

import grpc

_CODE_BY_VALUE: Dict[int, grpc.StatusCode] = {
    c.value[0]: c for c in grpc.StatusCode}


class MaxsimdError(Exception):
    """A failed maxsimd call.

    Attributes:
        code: the gRPC status code.
        details: the status message.
        method: the RPC that failed, e.g. ``"Rerank"``; empty for a check
            made before any call.
        attempts: how many times the call was tried (retries included).
    """

    def __init__(self, code: grpc.StatusCode, details: str, *,
                 method: str = "", attempts: int = 1) -> None:
        self.code = code
        self.details = details
        self.method = method
        self.attempts = attempts
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.method}: " if self.method else ""
        tries = (f" (after {self.attempts} attempts)"
                 if self.attempts > 1 else "")
        return f"{where}{self.code.name}: {self.details}{tries}"

    def __reduce__(self) -> Tuple[Any, ...]:  # picklable across processes
        return (_rebuild, (type(self), self.code.value[0], self.details,
                           self.method, self.attempts))


def _rebuild(cls: Type[MaxsimdError], code: int, details: str, method: str,
             attempts: int) -> MaxsimdError:
    err = cls.__new__(cls)
    MaxsimdError.__init__(err, _CODE_BY_VALUE[code], details, method=method,
                          attempts=attempts)
    return err


class InvalidArgumentError(MaxsimdError, ValueError):
    """INVALID_ARGUMENT: a malformed request (shape, dtype, limits)."""


class NotFoundError(MaxsimdError):
    """NOT_FOUND: unknown corpus, alias or document id."""


class AlreadyExistsError(MaxsimdError):
    """ALREADY_EXISTS: corpus name or document id taken."""


class ResourceExhaustedError(MaxsimdError):
    """RESOURCE_EXHAUSTED: queue full, message too large, or over budget."""


class DeadlineExceededError(MaxsimdError):
    """DEADLINE_EXCEEDED: the call's deadline passed."""


class UnauthenticatedError(MaxsimdError):
    """UNAUTHENTICATED: no credential, or a token the server does not know."""


class PermissionDeniedError(MaxsimdError):
    """PERMISSION_DENIED: a known credential that may not call the method
    (a query token on an admin call, or a client certificate not allowed to
    administer)."""


class UnavailableError(MaxsimdError):
    """UNAVAILABLE: no server reachable, or the server is draining."""


class FailedPreconditionError(MaxsimdError):
    """FAILED_PRECONDITION: e.g. dropping a corpus an alias points at."""


class UnimplementedError(MaxsimdError):
    """UNIMPLEMENTED: a layout or placement this server does not serve."""


class DataLossError(MaxsimdError):
    """DATA_LOSS: a damaged or missing file on the server."""


_CLASS_BY_CODE: Dict[grpc.StatusCode, Type[MaxsimdError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.DATA_LOSS: DataLossError,
}


def error_for(code: grpc.StatusCode, details: str, *, method: str = "",
              attempts: int = 1) -> MaxsimdError:
    """The most specific MaxsimdError subclass for ``code``."""
    cls = _CLASS_BY_CODE.get(code, MaxsimdError)
    return cls(code, details, method=method, attempts=attempts)


def from_rpc_error(error: grpc.RpcError, *, method: str,
                   attempts: int = 1) -> MaxsimdError:
    """A grpc.RpcError (which is also a grpc.Call) as a MaxsimdError."""
    code: Optional[grpc.StatusCode] = getattr(error, "code", lambda: None)()
    details: Optional[str] = getattr(error, "details", lambda: None)()
    return error_for(code or grpc.StatusCode.UNKNOWN, details or str(error),
                     method=method, attempts=attempts)


def from_status_code(code: int, message: str, *, method: str) -> MaxsimdError:
    """Converts a google.rpc.Code number (RerankResponse.status_code)."""
    return error_for(_CODE_BY_VALUE.get(code, grpc.StatusCode.UNKNOWN),
                     message, method=method)


def invalid_argument(details: str) -> InvalidArgumentError:
    """A client-side check's failure, shaped like the server's answer."""
    return InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT, details)
