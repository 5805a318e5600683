"""msgpack with numpy arrays, as openpi and RoboArena put them on the wire.

An array is a map ``{"__ndarray__": True, "data": <bytes>, "dtype": <str>,
"shape": [..]}``; a numpy scalar ``{"__npgeneric__": True, "data": <value>,
"dtype": <str>}``. openpi writes those keys as msgpack *bin* (bytes), so we
write bytes keys too (its decoder only recognises those) and accept both
bytes and str keys when reading. Object, void and complex dtypes are
refused in both directions: they are how pickle sneaks in.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

_ND = b"__ndarray__"
_NG = b"__npgeneric__"
_REFUSED_KINDS = ("O", "V", "c")


class CodecError(ValueError):
    """A message that is not valid msgpack-numpy."""


def _buffer(arr: np.ndarray) -> Any:
    """The array's own bytes without a copy (msgpack copies them once, straight
    into the message); datetime dtypes export no buffer and are copied."""
    try:
        return arr.data
    except (ValueError, TypeError):
        return arr.tobytes()


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in _REFUSED_KINDS:
            raise CodecError(f"refusing to send a {obj.dtype} array")
        arr = np.ascontiguousarray(obj)
        return {
            _ND: True,
            b"data": _buffer(arr),
            b"dtype": arr.dtype.str,
            b"shape": list(arr.shape),
        }
    if isinstance(obj, np.generic):
        if obj.dtype.kind in _REFUSED_KINDS:
            raise CodecError(f"refusing to send a {obj.dtype} scalar")
        return {_NG: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    if isinstance(obj, tuple):
        return list(obj)
    raise CodecError(f"cannot encode {type(obj).__name__}")


def _get(obj: dict[Any, Any], key: bytes) -> Any:
    if key in obj:
        return obj[key]
    return obj.get(key.decode())


def _hook(obj: dict[Any, Any]) -> Any:
    if _get(obj, _ND) is True:
        try:
            dtype = np.dtype(_get(obj, b"dtype"))
            shape = tuple(int(s) for s in _get(obj, b"shape"))
            data = _get(obj, b"data")
        except (TypeError, ValueError):
            # numpy's message quotes the sender's dtype text: not repeated (spec.peer_value)
            raise CodecError("malformed array: its dtype or shape is not understood") from None
        if dtype.kind in _REFUSED_KINDS:
            raise CodecError(f"refusing an array of dtype kind '{dtype.kind}'")
        if not isinstance(data, bytes | bytearray):
            raise CodecError("malformed array: data is not bytes")
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if len(data) != expected:
            raise CodecError("malformed array: its data's length does not match its shape")
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if _get(obj, _NG) is True:
        try:
            dtype = np.dtype(_get(obj, b"dtype"))
        except (TypeError, ValueError):
            raise CodecError("malformed scalar: its dtype is not understood") from None
        if dtype.kind in _REFUSED_KINDS:
            raise CodecError(f"refusing a scalar of dtype kind '{dtype.kind}'")
        try:
            return dtype.type(_get(obj, b"data"))
        except (TypeError, ValueError, OverflowError):
            raise CodecError("malformed scalar: its data does not fit its dtype") from None
    return obj


def packb(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def unpackb(data: bytes | bytearray) -> Any:
    try:
        return msgpack.unpackb(data, object_hook=_hook, raw=False, strict_map_key=False)
    except CodecError:
        raise
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError) as exc:
        # named by the error's type: a ValueError's text can quote the sender's data
        raise CodecError(f"not a msgpack message ({type(exc).__name__})") from None
