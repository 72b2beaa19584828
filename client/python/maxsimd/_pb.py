"""Imports the generated stubs, or says how to generate them.

Kept in one module so that every other module fails the same clear way when
the stubs are missing, instead of with a bare ``No module named maxsimd.v1``.
"""

try:
    from maxsimd.v1 import admin_pb2, admin_pb2_grpc  # noqa: F401
    from maxsimd.v1 import reranker_pb2, reranker_pb2_grpc  # noqa: F401
    from maxsimd.v1 import types_pb2  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised by hand
    raise ImportError(
        "maxsimd: the gRPC stubs (maxsimd.v1) are not generated. Run "
        "`python3 client/python/build_stubs.py` from the repository root, or "
        "`python3 client/python/build_stubs.py DIR` and set "
        "MAXSIMD_STUBS_DIR=DIR (needs grpc_tools: Debian's python3-grpc-tools)"
    ) from e

__all__ = ["admin_pb2", "admin_pb2_grpc", "reranker_pb2", "reranker_pb2_grpc",
           "types_pb2"]
