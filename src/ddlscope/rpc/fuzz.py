"""Fuzzing the OTLP JSON reader with seeded mutations of a real export.

:func:`fuzz_otlp_reader` mutates an OTLP JSON file with :func:`ddlscope.testing.mutate.mutate`,
reads each mutant with :func:`~ddlscope.rpc.readers.read_rpc_log` (``input_format="otlp"``) and
checks the reader's contract:

- either a user error (``ValueError`` or ``FileNotFoundError``) whose message is one line naming
  the file,
- or an :class:`~ddlscope.rpc.readers.RpcLog` whose accounting balances against an independent
  count of the mutant: every CLIENT or SERVER span of a parseable document is in a kept RPC (two
  spans each), in a rejected RPC row (two spans each: a reason of the schema checks), or a
  rejected span (``unmatched_client_span``, ``unmatched_server_span``, ``duplicate_server_span``,
  ``malformed_span``); in JSON lines, every line that is not an object is an ``unparseable_line``.

The independent count re-parses the mutant with :func:`json.loads` and walks only the OTLP
structure (``resourceSpans[].scopeSpans[].spans[]`` and the protobuf-style snake-case names); it
shares no code with the reader. The tests call it with hypothesis-drawn seeds; a benchmark can call
it with a range of seeds and print the counts.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddlscope.testing.mutate import mutate

SPAN_REASONS: frozenset[str] = frozenset({
    "unmatched_client_span", "unmatched_server_span", "duplicate_server_span", "duplicate_client_span",
    "malformed_span"})
"""Rejection reasons that stand for one span (the others stand for one RPC row, i.e. two spans,
or for one line)."""

_CLIENT_SERVER = {2, 3, "2", "3", "SPAN_KIND_SERVER", "SPAN_KIND_CLIENT", "SERVER", "CLIENT"}


@dataclass
class FuzzReport:
    """What :func:`fuzz_otlp_reader` saw.

    Attributes:
        examples: mutants read.
        user_errors: mutants refused with a one-line user error naming the file.
        balanced: mutants read with balanced accounting.
        failures: ``(seed, mutations, problem)`` for every mutant that broke the contract (a
            traceback's last line, a message not naming the file, or the unbalanced counts).
    """

    examples: int = 0
    user_errors: int = 0
    balanced: int = 0
    failures: list[tuple[int, list[str], str]] = field(default_factory=list)


def _documents(text: str) -> tuple[list[Any], int]:
    """The parsed documents of an OTLP file (one document, or JSON lines) and the count of its
    non-blank lines that are not JSON objects (JSON lines only)."""
    try:
        return [json.loads(text)], 0
    except ValueError:
        pass
    docs, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(obj, dict):
            docs.append(obj)
        else:
            bad += 1
    return docs, bad


def _get(d: dict, *names: str) -> Any:
    return next((d[n] for n in names if n in d), None)


def count_spans(text: str) -> tuple[int, int]:
    """``(CLIENT and SERVER spans, lines that are not JSON objects)`` in an OTLP JSON text, by an
    independent walk of the OTLP structure. Elements that are not of the structure's type (a span
    that is not an object, a ``spans`` that is not a list) count as one span each (the reader
    rejects them as ``malformed_span``)."""
    docs, bad = _documents(text)
    spans = 0
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        rss = _get(doc, "resourceSpans", "resource_spans")
        for rs in rss if isinstance(rss, list) else ([rss] if rss else []):
            if not isinstance(rs, dict):
                spans += 1
                continue
            sss = _get(rs, "scopeSpans", "scope_spans", "instrumentationLibrarySpans")
            for ss in sss if isinstance(sss, list) else ([sss] if sss else []):
                if not isinstance(ss, dict):
                    spans += 1
                    continue
                sps = ss.get("spans")
                for sp in sps if isinstance(sps, list) else ([sps] if sps else []):
                    if not isinstance(sp, dict):
                        spans += 1
                        continue
                    kind = sp.get("kind")
                    if isinstance(kind, str):
                        kind = kind.upper()
                    if type(kind) in (int, str) and kind in _CLIENT_SERVER:
                        spans += 1
    return spans, bad


@dataclass(frozen=True)
class OtlpCounts:
    """An OTLP file's spans against what the reader did with them.

    Attributes:
        spans: CLIENT and SERVER spans of the file (:func:`count_spans`).
        bad_lines: its lines that are not JSON objects (JSON lines only).
        kept: RPCs read (two spans each).
        row_rejected: RPC rows rejected by the schema checks (two spans each).
        span_rejected: spans rejected (:data:`SPAN_REASONS`).
        line_rejected: ``unparseable_line`` rejections.
        reasons: rejections by reason.
    """

    spans: int
    bad_lines: int
    kept: int
    row_rejected: int
    span_rejected: int
    line_rejected: int
    reasons: dict[str, int]

    @property
    def balanced(self) -> bool:
        """Every span in a kept RPC, a rejected RPC row or a rejected span; every bad line rejected."""
        return 2 * (self.kept + self.row_rejected) + self.span_rejected == self.spans \
            and self.line_rejected == self.bad_lines

    def describe(self) -> str:
        """The counts in words (for a failure's message)."""
        return (f"{self.spans} CLIENT/SERVER spans and {self.bad_lines} bad lines in the file; read {self.kept} RPCs, "
                f"{self.row_rejected} rejected RPC rows, {self.span_rejected} rejected spans, {self.line_rejected} "
                f"unparseable lines ({self.reasons})")


def otlp_counts(log, text: str) -> OtlpCounts:
    """Count ``text`` (an OTLP file, by :func:`count_spans`) against ``log``, the
    :class:`~ddlscope.rpc.readers.RpcLog` the reader made of it."""
    spans, bad_lines = count_spans(text)
    reasons: dict[str, int] = {}
    for r in log.rejected.get_column("reason").to_list():
        reasons[r] = reasons.get(r, 0) + 1
    return OtlpCounts(
        spans=spans, bad_lines=bad_lines, kept=log.frame.height,
        row_rejected=sum(n for r, n in reasons.items() if r not in SPAN_REASONS and r != "unparseable_line"),
        span_rejected=sum(n for r, n in reasons.items() if r in SPAN_REASONS),
        line_rejected=reasons.get("unparseable_line", 0), reasons=reasons)


def check_one(path: Path) -> tuple[str | None, bool]:
    """Read one OTLP file and check the contract (module docstring).

    Returns:
        ``(problem or None, refused)``: ``refused`` when the reader raised a user error.
    """
    from ddlscope.rpc.readers import read_rpc_log
    from ddlscope.testing.fuzz import USER_ERRORS, user_error_problem

    try:
        log = read_rpc_log(path, input_format="otlp")
    except USER_ERRORS as exc:
        return user_error_problem(exc, [str(path)]), True
    except Exception as exc:  # the point: anything else is a failure to report
        where = traceback.format_exc().strip().splitlines()
        return f"{type(exc).__name__}: {exc} | {where[-3].strip() if len(where) >= 3 else ''}", False
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return "read a file that is not UTF-8 without an error", False
    counts = otlp_counts(log, text)
    if not counts.balanced:
        return f"unbalanced: {counts.describe()}", False
    return None, False


def fuzz_otlp_reader(data: bytes, seeds: Iterable[int], workdir: str | Path, rounds: int = 1) -> FuzzReport:
    """Mutate OTLP JSON ``data`` once per seed and check the reader on each mutant.

    Args:
        data: the bytes of a real OTLP JSON export (one document, or JSON lines).
        seeds: mutation seeds (:func:`ddlscope.testing.mutate.mutate`).
        workdir: an existing folder for the mutants (``otlp-<seed>.json``, removed after reading).
        rounds: mutations applied one after the other per mutant.

    Returns:
        A :class:`FuzzReport`; the contract holds when ``failures`` is empty.
    """
    report = FuzzReport()
    for seed in seeds:
        mutant, names = mutate(data, seed, rounds=rounds)
        path = Path(workdir) / f"otlp-{seed}.json"
        path.write_bytes(mutant)
        problem, refused = check_one(path)
        report.examples += 1
        if problem is not None:
            report.failures.append((seed, names, problem))
        elif refused:
            report.user_errors += 1
        else:
            report.balanced += 1
        path.unlink()
    return report
