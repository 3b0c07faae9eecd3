"""Plain data between the solution's process and the judge's: JSON, and nothing that runs code.

What a case collects in the solution's process (returned values, tensors, counts) travels to the
judge as JSON text. Unpickling bytes the solution's process produced would let it run code in the
judge; json.loads builds only dicts, lists, strings and numbers. Tensors are sent as
{dtype, shape, values} (a float survives JSON exactly: json writes its shortest repr) and revived
with torch.tensor; tuples and dicts keep their kind; any other object becomes an `Opaque`: its
type's name and a short repr, enough for "expected a list, got a Foo: …".
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from typing import Any

import torch

MAX_DEPTH = 30          # deeper nesting is cut (a self-referencing list, say)
REPR_CHARS = 120


@dataclass(frozen=True)
class Opaque:
    """An object the transport does not carry: what it was, in words."""

    type_name: str
    text: str

    def __repr__(self) -> str:
        return self.text


def _repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as err:  # noqa: BLE001 - a student's __repr__ may fail
        text = f"<{type(value).__name__}: repr failed with {type(err).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= REPR_CHARS else text[:REPR_CHARS - 1] + "…"


def _float(value: float) -> Any:
    # JSON has no NaN or infinity: they travel as tagged strings
    return value if math.isfinite(value) else {"$": "float", "value": repr(value)}


def encode(value: Any, depth: int = 0) -> Any:
    """A JSON-ready form of `value` (in the solution's process)."""
    if depth > MAX_DEPTH:
        return {"$": "object", "type": type(value).__name__, "repr": "… (nested too deeply)"}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value) if type(value) is int else {"$": "number", "type": type(value).__name__,
                                                      "value": int(value)}
    if isinstance(value, numbers.Real):
        if type(value) is float:
            return _float(value)
        return {"$": "number", "type": type(value).__name__, "value": _float(float(value))}
    if isinstance(value, torch.Tensor) and value.layout == torch.strided and not value.is_complex():
        flat = value.detach().to("cpu").reshape(-1)
        return {"$": "tensor", "dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                "values": [_float(v) if isinstance(v, float) else v for v in flat.tolist()]}
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        items = [encode(v, depth + 1) for v in value]
        return items if isinstance(value, list) else {"$": "tuple", "items": items}
    if isinstance(value, (set, frozenset)):
        return {"$": "set", "items": sorted((encode(v, depth + 1) for v in value), key=repr)}
    if type(value) is dict:
        return {"$": "dict",
                "items": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    return {"$": "object", "type": type(value).__name__, "repr": _repr(value)}


def dumps(value: Any) -> bytes:
    return json.dumps(encode(value), separators=(",", ":")).encode()


# ---- in the judge's process ------------------------------------------------------------------------
class Unreadable(ValueError):
    """What came back is not what the solution's process is supposed to send."""


def _revive_float(obj: Any) -> float:
    if isinstance(obj, dict) and obj.get("$") == "float" and obj.get("value") in ("nan", "inf", "-inf"):
        return float(obj["value"])
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return obj
    raise Unreadable(f"not a number: {str(obj)[:40]}")


def decode(obj: Any) -> Any:
    """Python values (and torch tensors) from `encode`'s form (in the judge's process)."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if not isinstance(obj, dict):
        raise Unreadable(f"unexpected {type(obj).__name__}")
    kind = obj.get("$")
    if kind == "float":
        return _revive_float(obj)
    if kind == "number":
        return _revive_float(obj["value"]) if isinstance(obj["value"], (float, dict)) else obj["value"]
    if kind == "tuple":
        return tuple(decode(v) for v in obj["items"])
    if kind == "set":
        return {_hashable(decode(v)) for v in obj["items"]}
    if kind == "dict":
        return {_hashable(decode(k)): decode(v) for k, v in obj["items"]}
    if kind == "object":
        return Opaque(str(obj["type"]), str(obj["repr"]))
    if kind == "tensor":
        return _tensor(obj)
    raise Unreadable(f"unknown kind {str(kind)[:20]!r}")


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, tuple, type(None), Opaque)) else repr(value)


# What a tensor of plain numbers can be; anything else (quantized, complex) is no report of ours.
_INTEGERS = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}


def _tensor(obj: dict) -> torch.Tensor:
    dtype = getattr(torch, str(obj["dtype"]), None)
    if not isinstance(dtype, torch.dtype) or not (dtype.is_floating_point or dtype in _INTEGERS):
        raise Unreadable(f"unknown dtype {str(obj['dtype'])[:20]!r}")
    shape = [int(n) for n in obj["shape"]]
    values = [v if isinstance(v, (bool, int, float)) else _revive_float(v) for v in obj["values"]]
    if math.prod(shape) != len(values):
        raise Unreadable("a tensor whose values do not fill its shape")
    return torch.tensor(values, dtype=dtype).reshape(shape)


def loads(data: bytes) -> Any:
    """The value `dumps` wrote; Unreadable if the bytes are anything else."""
    try:
        return decode(json.loads(data.decode("utf-8")))
    except Unreadable:
        raise
    except Exception as err:  # noqa: BLE001 - the bytes are the solution's: whatever they make json or
        # torch raise (RecursionError when nested deep, RuntimeError for a shape or dtype torch refuses)
        # is a report the judge cannot read, never an error of the judge's
        raise Unreadable(f"{type(err).__name__}: {str(err)[:80]}") from None
