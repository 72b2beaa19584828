"""Python client for maxsimd, the MaxSim reranking service.

A thin, typed wrapper over the gRPC API of ``proto/maxsimd/v1``: numpy
arrays or torch tensors in, numpy arrays and dataclasses out, with
deadlines, retries on UNAVAILABLE, TLS options and client-side sharding;
blocking (``Client``) or asyncio (``AsyncClient``). ``maxsimd.pylate`` holds
an index for PyLate's retrieval pipeline.

    >>> import numpy as np, maxsimd
    >>> with maxsimd.Client("127.0.0.1:50051") as client:
    ...     result = client.rerank("demo", query, candidates=[3, 17, 42])
    ...     result.ids, result.scores

The generated stubs (``maxsimd.v1``) are not part of the source tree: an
installed package carries them (generated when its wheel was built); in a
checkout they are written by ``client/python/build_stubs.py`` into this
package's ``v1/`` folder, or into any folder named by the environment
variable ``MAXSIMD_STUBS_DIR`` (the folder that holds ``maxsimd/v1/``), which
takes precedence.
"""

import os as _os

_stubs_dir = _os.environ.get("MAXSIMD_STUBS_DIR")
if _stubs_dir:
    # The generated modules import each other as ``maxsimd.v1.*``, so the
    # stubs folder joins this package's search path rather than sys.path.
    __path__.insert(0, _os.path.join(_stubs_dir, "maxsimd"))  # noqa: F821
del _stubs_dir

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
from maxsimd.results import (  # noqa: E402
    AddResult,
    CorpusInfo,
    DeleteResult,
    Query,
    Result,
    Timing,
)
from maxsimd.retry import RetryPolicy  # noqa: E402
from maxsimd.client import (  # noqa: E402
    DEFAULT_MAX_MESSAGE_BYTES,
    Client,
    TlsOptions,
)
from maxsimd.aio import AsyncClient  # noqa: E402
from maxsimd.sharded import ShardedClient, merge_results  # noqa: E402
from maxsimd.pylate import PyLateIndex  # noqa: E402

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "AddResult",
    "AlreadyExistsError",
    "AsyncClient",
    "Client",
    "CorpusInfo",
    "DataLossError",
    "DeadlineExceededError",
    "DeleteResult",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "MaxsimdError",
    "NotFoundError",
    "PermissionDeniedError",
    "PyLateIndex",
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
