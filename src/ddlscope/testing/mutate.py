"""Mutations of real input files, for fuzzing every reader.

Each mutation takes the file's bytes and a :class:`random.Random` and returns new bytes; the same
seed gives the same result, so a failing example can be replayed. The mutations are the damage real
files show: cut short (a copy interrupted), flipped bytes (a bad disk or transfer), a column dropped
or duplicated (another tool's version), non-finite or huge numbers, lines reordered or duplicated (a
concatenation of logs), invalid UTF-8.

A reader passes a fuzz test when, for every mutated file, it either raises one of the project's
user errors (a clean one-line message naming the file) or returns a result whose accounting
balances: rows in = rows used + rows rejected with a reason.

Text mutations treat the content as lines split on ``\\n``; column mutations split a line on the
delimiter the first line uses most (``,``, tab, ``|``) and, for a JSON object per line, on keys.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable

Mutation = Callable[[bytes, random.Random], bytes]

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_NON_FINITE = (b"nan", b"NaN", b"inf", b"-inf", b"Infinity", b"-Infinity")
_HUGE = (b"1e308", b"-1e308", b"9223372036854775808", b"99999999999999999999999", b"1e400")


def truncate(data: bytes, rng: random.Random) -> bytes:
    """Cut the file at a random byte offset (possibly mid-line, mid-field or mid-character)."""
    if not data:
        return data
    return data[: rng.randrange(len(data))]


def flip_bytes(data: bytes, rng: random.Random) -> bytes:
    """Replace 1 to 8 random bytes with random values."""
    if not data:
        return data
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def invalid_utf8(data: bytes, rng: random.Random) -> bytes:
    """Insert a byte sequence that is not UTF-8 (a lone continuation byte or 0xFF) at a random offset."""
    pos = rng.randrange(len(data) + 1)
    return data[:pos] + rng.choice((b"\xff", b"\x80", b"\xc3\x28", b"\xed\xa0\x80")) + data[pos:]


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _delimiter(header: bytes) -> bytes:
    counts = {d: header.count(d) for d in (b",", b"\t", b"|")}
    return max(counts, key=counts.__getitem__)


def _is_json_lines(lines: list[bytes]) -> bool:
    first = next((ln for ln in lines if ln.strip()), b"")
    return first.lstrip().startswith(b"{")


def _mutate_json_objects(data: bytes, rng: random.Random, duplicate: bool) -> bytes:
    """Drop (or rename a copy of) one key in every JSON object of a JSON-lines file."""
    lines = _lines(data)
    objects = []
    for ln in lines:
        try:
            objects.append(json.loads(ln) if ln.strip() else None)
        except ValueError:
            objects.append(None)
    keys = sorted({k for o in objects if isinstance(o, dict) for k in o})
    if not keys:
        return data
    key = rng.choice(keys)
    out = []
    for ln, obj in zip(lines, objects, strict=True):
        if isinstance(obj, dict) and key in obj:
            if duplicate:
                obj[key + "_copy"] = obj[key]
            else:
                del obj[key]
            out.append(json.dumps(obj).encode())
        else:
            out.append(ln)
    return b"\n".join(out)


def _mutate_column(data: bytes, rng: random.Random, duplicate: bool) -> bytes:
    """Drop (or repeat in place) one column of every line of a delimited file, or one key of every
    JSON line: the column is drawn from the first line's width."""
    lines = _lines(data)
    if _is_json_lines(lines):
        return _mutate_json_objects(data, rng, duplicate=duplicate)
    delim = _delimiter(lines[0]) if lines else b","
    width = lines[0].count(delim) + 1 if lines else 1
    k = rng.randrange(width)
    out = []
    for ln in lines:
        fields = ln.split(delim)
        if len(fields) > k:
            if duplicate:
                fields.insert(k, fields[k])
            else:
                del fields[k]
        out.append(delim.join(fields))
    return b"\n".join(out)


def drop_column(data: bytes, rng: random.Random) -> bytes:
    """Remove one column from every line of a delimited file (or one key of every JSON line)."""
    return _mutate_column(data, rng, duplicate=False)


def duplicate_column(data: bytes, rng: random.Random) -> bytes:
    """Repeat one column of every line of a delimited file (header included: a duplicate name)."""
    return _mutate_column(data, rng, duplicate=True)


def _replace_numbers(data: bytes, rng: random.Random, choices: tuple[bytes, ...]) -> bytes:
    matches = list(_NUMBER.finditer(data))
    if not matches:
        return data
    out = bytearray(data)
    for m in sorted(rng.sample(matches, min(len(matches), rng.randint(1, 4))), key=lambda m: -m.start()):
        out[m.start() : m.end()] = rng.choice(choices)
    return bytes(out)


def non_finite_numbers(data: bytes, rng: random.Random) -> bytes:
    """Replace 1 to 4 numbers with NaN or an infinity (spelt as different tools spell them)."""
    return _replace_numbers(data, rng, _NON_FINITE)


def huge_numbers(data: bytes, rng: random.Random) -> bytes:
    """Replace 1 to 4 numbers with values past float64 or int64 range, or at its edge."""
    return _replace_numbers(data, rng, _HUGE)


def reorder_lines(data: bytes, rng: random.Random) -> bytes:
    """Shuffle every line after the first (the header, where there is one, stays first)."""
    lines = _lines(data)
    body = lines[1:]
    rng.shuffle(body)
    return b"\n".join(lines[:1] + body)


def duplicate_lines(data: bytes, rng: random.Random) -> bytes:
    """Repeat 1 to 5 random lines after the first, each right after itself."""
    lines = _lines(data)
    if len(lines) < 2:
        return data
    for _ in range(rng.randint(1, 5)):
        i = rng.randrange(1, len(lines))
        lines.insert(i, lines[i])
    return b"\n".join(lines)


TEXT_MUTATIONS: dict[str, Mutation] = {
    "truncate": truncate,
    "flip_bytes": flip_bytes,
    "invalid_utf8": invalid_utf8,
    "drop_column": drop_column,
    "duplicate_column": duplicate_column,
    "non_finite_numbers": non_finite_numbers,
    "huge_numbers": huge_numbers,
    "reorder_lines": reorder_lines,
    "duplicate_lines": duplicate_lines,
}
"""Every mutation for text inputs (CSV, JSON lines, JSON, TOML, nccl-tests output), by name."""

BINARY_MUTATIONS: dict[str, Mutation] = {"truncate": truncate, "flip_bytes": flip_bytes}
"""Mutations that make sense on binary inputs (Parquet, gzip): damage, not schema changes."""


def mutate(data: bytes, seed: int, names: tuple[str, ...] | None = None, rounds: int = 1) -> tuple[bytes, list[str]]:
    """Apply ``rounds`` random mutations to ``data``.

    Args:
        data: the file's bytes.
        seed: seed of the :class:`random.Random` that chooses mutations and their places.
        names: the mutations to choose from (keys of :data:`TEXT_MUTATIONS`); all of them if None.
        rounds: how many mutations to apply one after the other (>= 1).

    Returns:
        The mutated bytes and the names of the mutations applied, in order (for the failure message).

    Raises:
        KeyError: a name that is not a mutation.
    """
    rng = random.Random(seed)
    pool = names if names is not None else tuple(TEXT_MUTATIONS)
    applied = []
    for _ in range(rounds):
        name = rng.choice(pool)
        data = TEXT_MUTATIONS[name](data, rng)
        applied.append(name)
    return data, applied
