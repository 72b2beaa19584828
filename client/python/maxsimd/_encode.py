"""Embeddings and id lists to the wire format of maxsimd.v1.

Embeddings travel as ``Tensor{dtype, shape, data}``: raw little-endian,
row-major bytes, never as repeated floats, so that encoding is one
``tobytes()`` and the server reads them without parsing.

Inputs are numpy arrays, torch tensors or nested lists. torch is never
imported here: a tensor is recognised by its type's module and converted
through its own methods (``detach().cpu()``), so the package works, and
imports fast, without torch installed.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

from maxsimd._pb import types_pb2
from maxsimd.errors import invalid_argument
from maxsimd.results import IdsLike

# Wire dtypes by name, for the ``send_dtype`` options.
SEND_DTYPES = ("float32", "float16", "bfloat16")


def check_send_dtype(send_dtype: Optional[str]) -> None:
    """Refuses an unknown ``send_dtype`` before anything is sent."""
    if send_dtype is not None and send_dtype not in SEND_DTYPES:
        raise invalid_argument(
            f"send_dtype is {send_dtype!r}; need None or one of "
            f"{', '.join(SEND_DTYPES)}")


def is_torch_tensor(x: Any) -> bool:
    """Whether ``x`` is a torch.Tensor (or a subclass such as Parameter),
    decided without importing torch."""
    return any(c.__module__.split(".")[0] == "torch" and c.__name__ == "Tensor"
               for c in type(x).__mro__)


# Float types narrower than 16 bits (torch's and ml_dtypes' float8 types,
# ml_dtypes' float6 and float4): every value of each is a bfloat16 value (at
# most 8 exponent and 7 mantissa bits), so they are widened to float32 for
# numpy and travel as bfloat16, exactly, at half the bytes of float32.
# These are ml_dtypes' names; torch's float8 names share the prefix.
_NARROW_FLOAT_PREFIXES = ("float8_", "float6_", "float4_")


def _refuse_dtype(what: str, dtype: Any) -> Exception:
    return invalid_argument(
        f"{what} has dtype {dtype}; need float16, bfloat16, float32, float64, "
        "a float8 type (torch or ml_dtypes), float6/float4 (ml_dtypes) or "
        "integers")


def to_numpy(x: Any, what: str) -> Tuple[npt.NDArray[Any], Optional[str]]:
    """``x`` as a numpy array, with the wire dtype that keeps it exact.

    Returns ``(array, natural)``: ``natural`` is "float16" or "bfloat16"
    for input of 16 bits or fewer (sent that way by default), else None.

    - torch tensors: detached (``requires_grad`` is fine) and copied to the
      CPU from any device, at their own width; then bfloat16 and the float8
      types, which numpy lacks, become float32 (exact: each of their values
      is a float32 value), on the CPU, so that a GPU tensor never doubles in
      device memory or on the bus.
    - numpy arrays of float16, float32, float64 or an integer type, and
      ml_dtypes' bfloat16, float8, float6 and float4 types (widened to
      float32 the same way).
    - anything ``np.asarray`` takes (nested lists).

    Anything else (bool, complex, ml_dtypes' int4, torch's packed float4,
    quantized tensors, strings) is refused, naming the dtype.
    """
    natural: Optional[str] = None
    if is_torch_tensor(x):
        t = x.detach()
        dtype = str(t.dtype)  # "torch.bfloat16", without importing torch
        if t.is_complex() or dtype == "torch.bool":
            raise _refuse_dtype(what, dtype)
        t = t.cpu()  # first, at the tensor's own width
        name = dtype[len("torch."):]
        try:
            # torch's float4 is packed two to an element (float4_e2m1fn_x2):
            # not one value per element, so not widened, and refused below.
            if name == "bfloat16" or name.startswith("float8_"):
                t, natural = t.float(), "bfloat16"
            elif name == "float16":
                natural = "float16"
            a = t.numpy()
        except (TypeError, RuntimeError):  # a dtype numpy cannot hold
            raise _refuse_dtype(what, dtype) from None
    else:
        a = np.asarray(x)
        name = a.dtype.name
        if name == "bfloat16" or name.startswith(_NARROW_FLOAT_PREFIXES):
            # ml_dtypes (JAX, TensorFlow): dtype kind "V", with casts to
            # float32 registered by ml_dtypes.
            try:
                a = a.astype(np.float32)
            except (TypeError, ValueError):
                raise _refuse_dtype(what, a.dtype) from None
            natural = "bfloat16"
        elif a.dtype == np.float16:
            natural = "float16"
    if a.dtype.kind not in "fiu":
        raise _refuse_dtype(what, a.dtype)
    return a, natural


def to_matrix(x: Any,
              what: str) -> Tuple[npt.NDArray[Any], Optional[str]]:
    """``to_numpy``, checked to be 2-D ``[tokens, dim]``."""
    a, natural = to_numpy(x, what)
    if a.ndim != 2:
        raise invalid_argument(
            f"{what} must be 2-D [tokens, dim]; got shape {tuple(a.shape)}")
    return a, natural


def to_bfloat16_bits(a: npt.NDArray[Any]) -> npt.NDArray[np.uint16]:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even.

    numpy has no bfloat16; the top half of a binary32 is one, so rounding the
    low half away is exact arithmetic on the bit pattern. Inputs are finite
    (the server rejects NaN and Inf anyway).
    """
    bits = np.ascontiguousarray(a, dtype="<f4").view("<u4")
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    out: npt.NDArray[np.uint16] = ((bits + rounding) >> np.uint32(16)) \
        .astype("<u2")
    return out


def encode_array(a: npt.NDArray[Any], natural: Optional[str],
                 send_dtype: Optional[str]) -> Any:
    """A checked 2-D array as a ``maxsimd.v1.Tensor``.

    ``send_dtype`` None keeps float16 and bfloat16 input as it is and sends
    everything else as float32 (so 16-bit embeddings cost half the bytes and
    are not widened); "float16" / "bfloat16" halve the bytes of float32
    input at the cost of rounding before the server sees it.
    """
    dtype = send_dtype or natural or "float32"
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


def encode_tensor(array: Any, what: str,
                  send_dtype: Optional[str] = None) -> Any:
    """A ``[rows, d]`` array or tensor as a ``maxsimd.v1.Tensor``."""
    a, natural = to_matrix(array, what)
    return encode_array(a, natural, send_dtype)


def _scalar_id(i: Any, what: str) -> str:
    # A 0-d tensor or array, as iterating over a tensor yields.
    if (is_torch_tensor(i) or isinstance(i, np.ndarray)) and i.ndim == 0:
        return _scalar_id(i.item(), what)
    if isinstance(i, str):
        return i
    if isinstance(i, bytes):
        return i.decode("utf-8")
    if isinstance(i, (int, np.integer)) and not isinstance(i, (bool,
                                                               np.bool_)):
        return str(int(i))
    raise invalid_argument(
        f"{what} holds {i!r} of type {type(i).__name__}; need int or str")


def id_strings(ids: IdsLike, what: str = "ids") -> List[str]:
    """Document ids as the strings the API carries.

    ``ids``: a sequence of ints or strings, or a 1-D integer or string
    numpy array or integer torch tensor (any device). Integers become their
    decimal form (so int64 ids from a first stage match documents added
    with the same ints). Floats and bools are refused rather than turned
    into "1.0" or "True", which would silently match nothing.
    """
    if is_torch_tensor(ids):
        t: Any = ids
        if t.is_floating_point() or t.is_complex() or \
                str(t.dtype) == "torch.bool":
            raise invalid_argument(
                f"{what} has dtype {t.dtype}; need an integer tensor")
        ids = t.detach().cpu().numpy()
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise invalid_argument(
                f"{what} must be 1-D; got shape {tuple(ids.shape)}")
        if ids.dtype.kind in "iu":
            return [str(i) for i in ids.tolist()]
        if ids.dtype.kind == "U":
            return [str(i) for i in ids.tolist()]
        if ids.dtype.kind not in "OS":
            raise invalid_argument(
                f"{what} has dtype {ids.dtype}; need integers or strings")
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)):
        raise invalid_argument(f"{what} must be a sequence of ids, not one id")
    return [_scalar_id(i, what) for i in ids]
