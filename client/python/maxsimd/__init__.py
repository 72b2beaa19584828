"""Python client for maxsimd, the MaxSim reranking service.

A thin, typed wrapper over the gRPC API of ``proto/maxsimd/v1``: numpy arrays
in, numpy arrays out, with deadlines, retries on UNAVAILABLE, TLS options and
client-side sharding.

    >>> import numpy as np, maxsimd
    >>> with maxsimd.Client("127.0.0.1:50051") as client:
    ...     result = client.rerank("demo", query, candidates=[3, 17, 42])
    ...     result.ids, result.scores

The generated stubs (``maxsimd.v1``) are not part of the source tree: they are
written by ``client/python/build_stubs.py`` into this package's ``v1/`` folder,
or into any folder named by the environment variable ``MAXSIMD_STUBS_DIR``
(the folder that holds ``maxsimd/v1/``), which takes precedence.
"""

import os as _os

_stubs_dir = _os.environ.get("MAXSIMD_STUBS_DIR")
if _stubs_dir:
    # The generated modules import each other as ``maxsimd.v1.*``, so the
    # stubs folder joins this package's search path rather than sys.path.
    __path__.insert(0, _os.path.join(_stubs_dir, "maxsimd"))  # noqa: F821

from maxsimd.errors import (  # noqa: E402
    AlreadyExistsError,
    DataLossError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    MaxsimdError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
)
from maxsimd.results import Query, Result, Timing  # noqa: E402
from maxsimd.retry import RetryPolicy  # noqa: E402
from maxsimd.client import Client, TlsOptions  # noqa: E402
from maxsimd.sharded import ShardedClient, merge_results  # noqa: E402

__all__ = [
    "AlreadyExistsError",
    "Client",
    "DataLossError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "MaxsimdError",
    "NotFoundError",
    "PermissionDeniedError",
    "Query",
    "ResourceExhaustedError",
    "Result",
    "RetryPolicy",
    "ShardedClient",
    "Timing",
    "TlsOptions",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "merge_results",
]

__version__ = "0.1.0"
