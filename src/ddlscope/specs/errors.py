"""Turning validation errors into the one-line messages users see."""

from __future__ import annotations

from pydantic import ValidationError

_MAX_SHOWN_INPUT = 60


def describe_validation(exc: ValidationError, prefix: str = "") -> str:
    """``prefix.field: what was expected (got value)`` for each error, joined by ``; ``.

    Messages of our own validators (which already name the field) are shown as they are; pydantic's
    ``Value error,`` prefix is dropped; the offending input is quoted only when it is a short scalar
    (never a whole nested object).
    """
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        own = err["type"] == "value_error"
        inp = err.get("input")
        shown = repr(inp)
        quiet = own or isinstance(inp, dict | list | tuple | set) or len(shown) > _MAX_SHOWN_INPUT
        got = "" if quiet else f" (got {shown})"
        where = ".".join(x for x in (prefix, "" if own else loc) if x)
        parts.append(f"{where}: {msg}{got}" if where else f"{msg}{got}")
    return "; ".join(parts)
