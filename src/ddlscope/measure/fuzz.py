"""Fuzz targets of ``ddlscope trace``'s readers: the Kineto trace reader and the ``--rules`` CSV.

Each ``check_*`` function runs one reader on one (mutated) file, as the command does, and returns
its accounting; ``benchmarks/fuzz_readers.py`` and ``tests/measure/test_trace_fuzz.py`` call them on
files made by :func:`ddlscope.testing.mutate.mutate` from the samples below. A reader passes when
every mutated file either raises one of :data:`USER_ERRORS` with a one-line message naming the file,
or returns an accounting with ``unexplained == 0`` (rows in = rows used + rows rejected with a
reason) and, for traces, a breakdown that adds up (``residual_us == 0``).

- :func:`check_kineto`: :func:`~ddlscope.measure.reader.read_traces` then the analysis
  (:func:`~ddlscope.measure.analysis.analyze`, no what-if). Rows are trace events: ``rows_in``
  counted from the file with Python's ``json`` module (independently of the reader's msgspec
  decoding), ``used`` the complete events kept, ``rejected`` the events counted under a reason in
  :attr:`~ddlscope.measure.reader.KinetoTrace.skipped` (metadata/instant/flow phases, the profiler's
  own span, bad times).
- :func:`check_rules_csv`: :func:`~ddlscope.measure.rules.load_rules` on a CSV of kernel rules. The
  reader refuses the whole file for any bad row, so ``rejected`` is always 0: ``rows_in`` (the
  non-blank CSV records after the header, counted with the ``csv`` module) must equal the rules
  loaded.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from ddlscope.testing.fuzz import USER_ERRORS  # TraceReadError and RulesError are ValueErrors

__all__ = ["INFERRED_TRACE", "SMALLEST_TRACE", "USER_ERRORS", "check_kineto", "check_rules_csv",
           "inferred_iterations_sample", "kineto_samples", "rules_csv_sample"]

SMALLEST_TRACE = "hta_traces/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
"""The smallest shared trace (319,512 bytes of JSON, 1,408 events), relative to ``shared/data``."""

_EXCLUSIVE = ("compute_bound_us", "memory_bound_us", "unclassified_us", "comm_exposed_us", "device_copy_us",
              "data_io_us", "idle_us")


def _json_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def kineto_samples(shared_data: str | Path) -> dict[str, bytes]:
    """Clean inputs for :func:`check_kineto` from :data:`SMALLEST_TRACE` (decompressed: mutate the
    JSON, not the gzip stream): ``pretty.json`` as written by the profiler (indented), and
    ``lines.json``, the same document with one event per line (so that line mutations, such as a
    duplicated line, often leave valid JSON and reach the analysis)."""
    raw = _json_bytes(Path(shared_data) / SMALLEST_TRACE)
    doc = json.loads(raw)
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    lines = (json.dumps(head)[:-1] + ', "traceEvents": [\n'
             + ",\n".join(json.dumps(e) for e in doc["traceEvents"]) + "\n]}\n")
    return {"pretty.json": raw, "lines.json": lines.encode()}


INFERRED_TRACE = "param_dlrm/resnet_kineto.json.gz"
"""The shared trace without ProfilerStep markers (DataLoader and Optimizer.step annotations)."""


def inferred_iterations_sample(shared_data: str | Path) -> bytes:
    """A cut-down copy of :data:`INFERRED_TRACE` for :func:`check_kineto` that reaches the inferred
    iterations (:func:`ddlscope.measure.iterations.segment_period`): its metadata events and the
    complete events from the 2nd ``enumerate(DataLoader)`` call to 60 ms after the 5th (7,703 events,
    1.9 MB of JSON, one event per line; about 2 s per check, so for ``benchmarks/fuzz_readers.py``
    rather than the test suite)."""
    doc = json.loads(_json_bytes(Path(shared_data) / INFERRED_TRACE))
    events = doc["traceEvents"]
    starts = sorted(e["ts"] for e in events if str(e.get("name", "")).startswith("enumerate(DataLoader)#"))
    lo, hi = starts[1], starts[4] + 60_000
    keep = [e for e in events if e.get("ph") == "M" or (e.get("ph") == "X" and lo <= e.get("ts", 0) < hi)]
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    return (json.dumps(head)[:-1] + ', "traceEvents": [\n' + ",\n".join(json.dumps(e) for e in keep)
            + "\n]}\n").encode()


def rules_csv_sample() -> bytes:
    """A clean input for :func:`check_rules_csv`: the built-in kernel rules
    (``measure/data/trace_rules.toml``) as a CSV ``pattern,class,kind``."""
    text = resources.files("ddlscope.measure").joinpath("data/trace_rules.toml").read_text()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["pattern", "class", "kind"])
    for rule in tomllib.loads(text)["kernel"]:
        writer.writerow([rule["pattern"], rule["class"], rule.get("kind", rule["class"])])
    return buf.getvalue().encode()


def _count_events(path: Path) -> int:
    """Events in the trace, by Python's ``json`` module (which reads NaN and Infinity too)."""
    doc = json.loads(_json_bytes(path))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return len(events)


def check_kineto(path: str | Path) -> dict[str, Any]:
    """Read one trace file and analyse it the way ``ddlscope trace FILE --no-whatif`` does.

    Returns:
        ``rows_in`` (events in the file), ``used`` (complete events kept), ``rejected`` (events not
        used, each under a reason), ``unexplained`` (``rows_in - used - rejected``; 0 for a pass),
        ``reasons`` (rejected events by reason), ``residual_us`` (largest ``|window - components -
        idle|`` over the breakdown's rows; 0 for a pass), ``iterations`` (breakdown rows).

    Raises:
        One of :data:`USER_ERRORS` for a file the command refuses (the message names the file).
    """
    from ddlscope.measure.analysis import analyze
    from ddlscope.measure.reader import read_traces
    from ddlscope.measure.rules import load_rules

    path = Path(path)
    notes: list[str] = []
    kineto, executions = read_traces([path], notes)
    a = analyze(kineto, executions, load_rules(), input_notes=notes)
    reasons: dict[str, int] = {}
    for t in kineto:
        for k, v in t.skipped.items():
            reasons[k] = reasons.get(k, 0) + v
    used = sum(t.events.height for t in kineto)
    rejected = sum(reasons.values())
    rows_in = _count_events(path)
    bd = a.breakdown
    residual = (bd["window_us"] - bd.select(pl.sum_horizontal(_EXCLUSIVE)).to_series()).abs().max()
    return {"rows_in": rows_in, "used": used, "rejected": rejected, "unexplained": rows_in - used - rejected,
            "reasons": reasons, "residual_us": float(residual or 0.0), "iterations": bd.height}


def check_rules_csv(path: str | Path) -> dict[str, Any]:
    """Load one ``--rules`` CSV file the way ``ddlscope trace --rules FILE`` does.

    Returns:
        ``rows_in`` (non-blank CSV records after the header), ``used`` (kernel rules loaded from the
        file), ``rejected`` (0: a bad row refuses the whole file), ``unexplained`` (``rows_in -
        used``; 0 for a pass).

    Raises:
        :class:`~ddlscope.measure.rules.RulesError` (a ``ValueError``) for a file the command
        refuses, naming the file (and the line and field).
    """
    from ddlscope.measure.rules import load_rules

    path = Path(path)
    rules = load_rules(path)
    used = rules.kernel.filter(pl.col("origin").str.starts_with(f"{path}#")).height
    records = [r for r in csv.reader(io.StringIO(path.read_bytes().decode("utf-8"))) if r]
    rows_in = max(len(records) - 1, 0)
    return {"rows_in": rows_in, "used": used, "rejected": 0, "unexplained": rows_in - used}
