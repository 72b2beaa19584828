"""numpy arrays and id lists to the wire format of maxsimd.v1.

Embeddings travel as ``Tensor{dtype, shape, data}``: raw little-endian,
row-major bytes, never as repeated floats, so that encoding is one
``tobytes()`` and the server reads them without parsing.
"""

from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from maxsimd._pb import types_pb2
from maxsimd.errors import invalid_argument
from maxsimd.results import IdsLike

# Wire dtypes by name, for the ``send_dtype`` options.
SEND_DTYPES = ("float32", "float16", "bfloat16")


def to_bfloat16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even.

    numpy has no bfloat16; the top half of a binary32 is one, so rounding the
    low half away is exact arithmetic on the bit pattern. Inputs are finite
    (the server rejects NaN and Inf anyway).
    """
    bits = np.ascontiguousarray(a, dtype="<f4").view("<u4")
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return ((bits + rounding) >> np.uint32(16)).astype("<u2")


def encode_tensor(array: Any, what: str,
                  send_dtype: Optional[str] = None) -> Any:
    """A ``[rows, d]`` array as a ``maxsimd.v1.Tensor``.

    ``send_dtype`` None keeps float16 input as float16 and sends everything
    else as float32 (so fp16 embeddings cost half the bytes and are not
    widened); "float16" / "bfloat16" halve the bytes of float32 input at the
    cost of rounding before the server sees it.
    """
    a = np.asarray(array)
    if a.ndim != 2:
        raise invalid_argument(
            f"{what} must be 2-D [tokens, dim]; got shape {tuple(a.shape)}")
    if a.dtype.kind not in "fiu":
        raise invalid_argument(
            f"{what} has dtype {a.dtype}; need a float array")
    dtype = send_dtype or ("float16" if a.dtype == np.float16 else "float32")
    if dtype == "float32":
        data = np.ascontiguousarray(a, dtype="<f4").tobytes()
        wire = types_pb2.DTYPE_FLOAT32
    elif dtype == "float16":
        data = np.ascontiguousarray(a, dtype="<f2").tobytes()
        wire = types_pb2.DTYPE_FLOAT16
    elif dtype == "bfloat16":
        data = to_bfloat16_bits(a).tobytes()
        wire = types_pb2.DTYPE_BFLOAT16
    else:
        raise invalid_argument(
            f"send_dtype is {dtype!r}; need one of {', '.join(SEND_DTYPES)}")
    return types_pb2.Tensor(dtype=wire, shape=list(a.shape), data=data)


def id_strings(ids: IdsLike, what: str = "ids") -> List[str]:
    """Document ids as the strings the API carries.

    Integers become their decimal form (so int64 ids from a first stage match
    documents added with the same ints). Floats and bools are refused rather
    than turned into "1.0" or "True", which would silently match nothing.
    """
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise invalid_argument(
                f"{what} must be 1-D; got shape {tuple(ids.shape)}")
        if ids.dtype.kind in "iu":
            return [str(i) for i in ids.tolist()]
        if ids.dtype.kind == "U":
            return ids.tolist()
        if ids.dtype.kind != "O":
            raise invalid_argument(
                f"{what} has dtype {ids.dtype}; need integers or strings")
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)):
        raise invalid_argument(f"{what} must be a sequence of ids, not one id")
    out: List[str] = []
    for i in ids:
        if isinstance(i, str):
            out.append(i)
        elif isinstance(i, (int, np.integer)) and not isinstance(i, bool):
            out.append(str(int(i)))
        elif isinstance(i, bytes):
            out.append(i.decode("utf-8"))
        else:
            raise invalid_argument(
                f"{what} holds {i!r} of type {type(i).__name__}; "
                "need int or str")
    return out
