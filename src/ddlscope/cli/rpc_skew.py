"""``ddlscope rpc skew`` and ``ddlscope rpc offload``: parameter-update skew and the switch what-if.

Option values and defaults come from the analysis modules (their constants are cheap to import:
Polars and NumPy are loaded by the CLI anyway, SciPy only when a fit runs); the report modules
(matplotlib) are imported inside the commands. Every option is checked before the source is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from ddlscope.cli.common import FormatOpt, OverwriteOpt, user_errors
from ddlscope.report.console import FORMATS, expected_one_of
from ddlscope.skew.frequency import DEFAULT_HOT_FRACTION, DEFAULT_WINDOW_EVENTS
from ddlscope.skew.offload import (
    DEFAULT_EMBEDDING_DIM,
    DEFAULT_KEY_BYTES,
    DEFAULT_METADATA_BYTES,
    DEFAULT_REFRESH_ITERATIONS,
    DEFAULT_SPACE_SAVING_COUNTERS,
    DEFAULT_VALUE_BYTES,
    DEFAULT_WIRE_VALUE_BYTES,
    POLICIES,
)
from ddlscope.skew.streams import DEFAULT_REPLAY_BATCH_EVENTS, DEFAULT_REPLAY_WORKERS, SOURCE_KINDS

MAX_BUDGET_BYTES = 1 << 40
"""Largest ``--budget`` accepted (1 TiB): orders of magnitude beyond the on-chip memory of any
switch ASIC, and far inside int64."""

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(text: str) -> int:
    """``'256KiB'`` -> 262144. Units: B, kB/MB/GB (powers of 1000), KiB/MiB/GiB (powers of 1024);
    a bare number is bytes. The size must be a whole number of bytes (``1.5KiB`` is, ``0.5B`` is
    not), at most :data:`MAX_BUDGET_BYTES`.

    Raises:
        ValueError: anything else (the message shows the accepted forms).
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise ValueError(f"--budget {text!r}: expected a size like 262144, 256KiB, 1MiB or 4MB")
    number = m.group(1)
    whole, _, frac = number.partition(".")
    # exact arithmetic on the digits: 1.5 MiB = 15 * 2^20 / 10
    numerator, denominator = int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac)
    value, rest = divmod(numerator * _UNITS[unit], denominator)
    if rest:
        raise ValueError(f"--budget {text!r}: not a whole number of bytes")
    if value > MAX_BUDGET_BYTES:
        raise ValueError(f"--budget {text!r}: expected at most 1 TiB (a switch holds megabytes)")
    return value


SourceArg = Annotated[Path, typer.Argument(help="RPC log with keys (.parquet/.jsonl), per-key update-count table "
                                                "(.parquet), a CSV/Parquet table with --column, or a text file")]
ColumnOpt = Annotated[str | None, typer.Option("--column", "-c", help="categorical column to read as the key stream "
                                                                      "(e.g. C1 of a Criteo CSV)")]
KindOpt = Annotated[str, typer.Option("--kind", help=f"source kind: {', '.join(SOURCE_KINDS)}")]
VocabularyOpt = Annotated[Path | None, typer.Option("--vocabulary", help="table naming integer keys (key, "
                                                                         "optional table_id, label/feature/token "
                                                                         "column), e.g. ps-train's "
                                                                         "vocabulary.parquet")]
ReportOpt = Annotated[Path | None, typer.Option("--report", "-o", help="write an HTML report folder here (a new or "
                                                                       "empty folder, or an earlier report's)")]


def _streaming_options(streaming: bool, source: Path, column: str | None, chunk_rows: int | None,
                       progress: bool | None) -> tuple[int, bool]:
    """``--chunk-rows`` and ``--progress`` resolved (defaults 1,000,000 rows and on), refused without
    ``--streaming`` (they would do nothing), and a folder with ``--column`` refused without it (only
    the streamed reader takes a folder of a column's partition files).

    Raises:
        ValueError: ``--chunk-rows`` below 1; either option, or a folder, without ``--streaming``.
    """
    if not streaming:
        given = [name for name, v in (("--chunk-rows", chunk_rows), ("--progress/--no-progress", progress))
                 if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: read with --streaming only (without it the whole source is "
                             "read at once)")
        if column is not None and Path(source).is_dir():
            raise ValueError(f"{source}: a folder is read with --streaming only (a folder of CSV/TSV/Parquet "
                             "partition files of one --column); without it give one file")
    rows = 1_000_000 if chunk_rows is None else chunk_rows
    if rows < 1:
        raise ValueError(f"--chunk-rows: expected >= 1, got {rows}")
    return rows, True if progress is None else progress


def _check_common(fmt: str, kind: str, report: Path | None, overwrite: bool) -> None:
    """``--format``, ``--kind`` and the report folder, before anything is read."""
    from ddlscope.report.outdir import check_report_dir

    expected_one_of(fmt, FORMATS)
    if kind not in SOURCE_KINDS:
        raise ValueError(f"--kind: expected one of {', '.join(SOURCE_KINDS)}, got {kind!r}")
    if report is not None:
        check_report_dir(report, "--report", overwrite)


def _write_report(report: Path, overwrite: bool, writer: str, *args: object) -> Path:
    """Write a report folder with ``ddlscope.report.skew.<writer>`` after checking it again."""
    from ddlscope.report import skew as skew_reports  # matplotlib: imported only when a report is written
    from ddlscope.report.outdir import check_report_dir, clear_previous_report

    check_report_dir(report, "--report", overwrite)
    clear_previous_report(report)
    return getattr(skew_reports, writer)(*args, report)


def _warn_if_table_read_as_text(source: Path, kind: str, resolved: str) -> None:
    """A warning on stderr when ``--kind auto`` reads a CSV/TSV table as text."""
    if kind != "auto" or resolved != "text":
        return
    from rich.markup import escape

    from ddlscope.cli.common import err_console
    from ddlscope.skew.streams import table_warning

    if (warning := table_warning(source)) is not None:
        err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}")


def _skew_streamed(source: Path, column: str | None, kind: str, vocabulary: Path | None, events: str, window: int,
                   hot_fraction: float, support: int | None, chunk_rows: int, show_progress: bool):
    """``rpc skew --streaming``: :func:`ddlscope.skew.streaming.analyze_skew_streaming` with a
    progress line per pass on stderr; the same :class:`~ddlscope.skew.frequency.SkewAnalysis`."""
    from ddlscope.cli.common import err_console
    from ddlscope.skew.streaming import analyze_skew_streaming

    _check_streaming_source(source, column, kind)
    if vocabulary is not None:
        raise ValueError(f"{vocabulary}: a vocabulary names integer keys; a column stream has none")
    with _batch_progress(show_progress, lambda name: "rows" if name.startswith("pass 1") else "events") as on_batch:
        s = analyze_skew_streaming(source, column, events=events, window=window, hot_fraction=hot_fraction,
                                   support=support, chunk_rows=chunk_rows, on_batch=on_batch)
    err_console.print(f"streamed: {s.rows:,} rows of {len(s.files)} file(s) in {s.batches} batch(es), two passes, "
                      f"{s.wall_s:.1f} s (exact: equal to the in-memory analysis)")
    return s.analysis


STREAMING_SOURCES = ("--streaming reads one key column of CSV/TSV/Parquet files or a folder of them (give --column "
                     "NAME); text, RPC logs and update-count tables are ordered over the whole input: run without "
                     "--streaming")
"""Why ``--streaming`` refuses a source (``rpc skew`` and ``rpc offload``)."""


def _check_streaming_source(source: Path, column: str | None, kind: str) -> None:
    """``--streaming`` needs ``--column`` (and ``--kind`` auto or column) of CSV/TSV/Parquet files,
    checked before anything is read.

    Raises:
        ValueError: no column, another kind, or a JSON-lines file (the message says what is supported).
    """
    if column is None or kind not in ("auto", "column"):
        raise ValueError(STREAMING_SOURCES if column is None else f"--kind {kind}: {STREAMING_SOURCES}")
    if source.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        raise ValueError(f"{source}: JSON lines are not streamed; {STREAMING_SOURCES}")


@contextmanager
def _batch_progress(show: bool, unit_of: Callable[[str], str] = lambda name: "rows",
                    ) -> Iterator[Callable[[str, int], None]]:
    """An ``on_batch(pass_name, count)`` callback drawing one progress line per pass on stderr
    (count done, per second, elapsed; counted in ``unit_of(pass_name)``: rows read, events or pushes
    replayed) while the block runs; a no-op callback when ``show`` is False."""
    bar = None
    if show:
        from rich.console import Console
        from rich.progress import Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("{task.description}:"), TextColumn("{task.fields[rows]} {task.fields[unit]},"),
                       TextColumn("{task.fields[rate]} {task.fields[unit]}/s,"), TimeElapsedColumn(),
                       console=Console(stderr=True))
        bar.start()
    tasks: dict[str, tuple[int, int, float]] = {}

    def on_batch(name: str, rows: int) -> None:
        if bar is None:
            return
        import time

        if name not in tasks:
            tasks[name] = (bar.add_task(name, rows="0", rate="-", unit=unit_of(name)), 0, time.perf_counter())
        task, done, t0 = tasks[name]
        done += rows
        tasks[name] = (task, done, t0)
        bar.update(task, rows=f"{done:,}", rate=f"{done / max(time.perf_counter() - t0, 1e-9):,.0f}")

    try:
        yield on_batch
    finally:
        if bar is not None:
            bar.stop()


def register(rpc_app: typer.Typer) -> None:
    """Add ``skew`` and ``offload`` to the ``rpc`` group."""

    @rpc_app.command()
    @user_errors
    def skew(
        source: SourceArg,
        column: ColumnOpt = None,
        kind: KindOpt = "auto",
        events: Annotated[str, typer.Option("--events", help="count updates (push + raw), accesses (pull + raw) "
                                                              "or all")] = "updates",
        window: Annotated[int, typer.Option("--window", help="events per churn window when the source has no "
                                                             "iterations")] = DEFAULT_WINDOW_EVENTS,
        hot_fraction: Annotated[float, typer.Option("--hot-fraction", help="hot-set size for churn, as a fraction "
                                                                          "of the distinct keys")
                                ] = DEFAULT_HOT_FRACTION,
        support: Annotated[int | None, typer.Option("--support", help="ranks of the Zipf fit, e.g. the table's "
                                                                      "rows (default: distinct keys seen)")] = None,
        top: Annotated[int, typer.Option("--top", help="most frequent keys to print")] = 15,
        vocabulary: VocabularyOpt = None,
        streaming: Annotated[bool, typer.Option(
            "--streaming", help="never hold the whole column: read it in batches in two passes, exact "
            "(a --column of CSV/TSV/Parquet files or a folder of them; see docs/streaming.md)")] = False,
        chunk_rows: Annotated[int | None, typer.Option(
            "--chunk-rows", help="with --streaming: input rows per batch [default: 1000000]")] = None,
        progress: Annotated[bool | None, typer.Option(
            "--progress/--no-progress", help="with --streaming: rows read per pass and rate on stderr "
            "[default: progress]")] = None,
        report: ReportOpt = None,
        overwrite: OverwriteOpt = False,
        fmt: FormatOpt = "table",
    ) -> None:
        """Per-key update frequency: rank-frequency, Zipf fit with goodness of fit, coverage of the
        top 0.1/1/10 % of keys, reuse distance and hot-set churn.

        Text files are tokenised as lower-cased runs of the letters a-z.
        """
        _check_common(fmt, kind, report, overwrite)
        if window < 1:
            raise ValueError(f"--window: expected >= 1 events, got {window}")
        if not 0 < hot_fraction <= 1:
            raise ValueError(f"--hot-fraction: expected a fraction in (0, 1], got {hot_fraction}")
        if support is not None and support < 1:
            raise ValueError(f"--support: expected >= 1 ranks, got {support}")
        if top < 0:
            raise ValueError(f"--top: expected >= 0, got {top}")
        chunk_rows, progress = _streaming_options(streaming, source, column, chunk_rows, progress)
        import polars as pl

        from ddlscope.cli.common import err_console
        from ddlscope.report.console import emit

        if streaming:
            a = _skew_streamed(source, column, kind, vocabulary, events, window, hot_fraction, support, chunk_rows,
                               progress and fmt == "table")
        else:
            from ddlscope.skew.frequency import analyze_skew
            from ddlscope.skew.streams import load_stream, resolve_kind, with_vocabulary

            resolved = resolve_kind(source, kind, column)
            _warn_if_table_read_as_text(source, kind, resolved)
            stream = load_stream(source, resolved, column)
            if vocabulary is not None:
                stream = with_vocabulary(stream, vocabulary)
            a = analyze_skew(stream, events=events, window=window, hot_fraction=hot_fraction, support=support)
        summary = a.summary()
        if fmt == "table":
            fits = pl.DataFrame({
                "model": ["Zipf rank-frequency f(r) ∝ r^-s (MLE over ranks)",
                          "power law P(f) ∝ f^-alpha, f ≥ xmin (CSN)", "log-normal on the same tail (rival)"],
                "exponent": [a.zipf.s, a.power_law.alpha if a.power_law else None, None],
                "stderr": [a.zipf.s_stderr, a.power_law.alpha_stderr if a.power_law else None, None],
                "ks_distance": [a.zipf.ks_distance, a.power_law.ks_distance if a.power_law else None, None],
                "detail": [f"support {a.zipf.support:,} ranks",
                           (f"xmin {a.power_law.xmin}, {a.power_law.n_tail:,} keys in tail, s = 1/(alpha-1) = "
                            f"{a.power_law.s_equivalent:.3f}") if a.power_law else "too few keys",
                           (f"mu {a.lognormal.mu:.3g}, sigma {a.lognormal.sigma:.3g}; R = "
                            f"{a.comparison.log_likelihood_ratio:.2f}, Vuong z = {a.comparison.normalized_ratio:.2f}, "
                            f"p = {a.comparison.p_value:.3g} -> {a.comparison.favoured}")
                           if a.lognormal and a.comparison else "-"],
            })
            emit(fits, "table", title=f"Update skew: {a.source} ({a.num_events:,} {events} events, "
                                      f"{a.num_keys:,} keys)")
            emit(a.coverage, "table", title="Share of events on the top keys")
            emit(a.ranks.head(top).drop("key"), "table", title=f"Top {top} keys", extra={
                "reuse distance median / p90 (distinct keys)":
                    f"{summary['reuse_distance_median']:g} / {summary['reuse_distance_p90']:g}",
                "cold-miss share": summary["cold_miss_share"],
                f"hot-set churn per window ({a.churn_window}, top {a.hot_keys} keys), mean / p90":
                    f"{summary['churn_mean']:.3f} / {summary['churn_p90']:.3f}" if summary["churn_mean"] is not None
                    else "one window only",
                **({"skipped": a.skipped} if a.skipped else {}),
            })
        elif fmt == "csv":
            emit(a.ranks, "csv")
        else:
            emit(a.ranks.head(top), fmt, extra=summary)
        if report is not None:
            path = _write_report(report, overwrite, "skew_report", a)
            err_console.print(f"report: {path}")

    @rpc_app.command()
    @user_errors
    def offload(
        source: SourceArg,
        column: ColumnOpt = None,
        kind: KindOpt = "auto",
        budget: Annotated[list[str] | None, typer.Option("--budget", "-b", help="switch memory budget, repeatable "
                                                                             "(e.g. 256KiB, 4MiB); default: a "
                                                                             "doubling sweep")] = None,
        policy: Annotated[list[str] | None, typer.Option("--policy", "-p", help=f"hot-set policy, repeatable: "
                                                                             f"{', '.join(POLICIES)} (default all)")
                          ] = None,
        dim: Annotated[int | None, typer.Option("--dim", help="embedding dimension (values per row); default: "
                                                 "from the log's ps-train run.json or its pull response sizes, "
                                                 f"else {DEFAULT_EMBEDDING_DIM} (with a warning)")] = None,
        value_bytes: Annotated[int, typer.Option("--value-bytes", help="bytes per value in the switch (32-bit "
                                                                       "integer registers)")] = DEFAULT_VALUE_BYTES,
        key_bytes: Annotated[int, typer.Option("--key-bytes", help="per-entry key bytes")] = DEFAULT_KEY_BYTES,
        metadata_bytes: Annotated[int, typer.Option("--metadata-bytes", help="per-entry metadata bytes (worker "
                                                                             "bitmap + counter)")
                                  ] = DEFAULT_METADATA_BYTES,
        wire_value_bytes: Annotated[int, typer.Option("--wire-value-bytes", help="bytes per value on the wire "
                                                                                 "(4 fp32, 2 fp16)")
                                    ] = DEFAULT_WIRE_VALUE_BYTES,
        warmup: Annotated[int | None, typer.Option("--warmup-iterations", help="iterations that only train the "
                                                                                "policies (default 10 %)")] = None,
        refresh: Annotated[int, typer.Option("--refresh-iterations", help="re-install the hot set every N "
                                                                          "iterations")
                       ] = DEFAULT_REFRESH_ITERATIONS,
        ss_counters: Annotated[float, typer.Option("--ss-counters", help="Space-Saving counters per switch entry")
                               ] = DEFAULT_SPACE_SAVING_COUNTERS,
        workers: Annotated[int, typer.Option("--workers", help="workers, to replay a raw stream as training")
                           ] = DEFAULT_REPLAY_WORKERS,
        batch_events: Annotated[int, typer.Option("--batch-events", help="events per worker mini-batch when "
                                                                         "replaying a raw stream")
                                ] = DEFAULT_REPLAY_BATCH_EVENTS,
        streaming: Annotated[bool, typer.Option(
            "--streaming", help="never hold the whole key stream: read the column in batches, spill the key ids "
            "and replay the iterations block by block, exact (a --column of CSV/TSV/Parquet files or a folder of "
            "them; see docs/streaming.md)")] = False,
        chunk_rows: Annotated[int | None, typer.Option(
            "--chunk-rows", help="with --streaming: input rows per batch (and about the events per replayed "
            "block) [default: 1000000]")] = None,
        progress: Annotated[bool | None, typer.Option(
            "--progress/--no-progress", help="with --streaming: rows read and events replayed per pass, on "
            "stderr [default: progress]")] = None,
        report: ReportOpt = None,
        overwrite: OverwriteOpt = False,
        fmt: FormatOpt = "table",
    ) -> None:
        """Simulate a programmable switch holding a hot set within a memory budget: pushes
        aggregated, pulls served, server updates and bytes saved, per policy and budget; with an
        RPC log, the latency gain from its stage breakdown.

        A raw stream (text, a column) is replayed as data-parallel training first (--workers,
        --batch-events).
        """
        from ddlscope.cli.common import err_console

        _check_common(fmt, kind, report, overwrite)
        policies = tuple(policy) if policy else POLICIES
        unknown = [p for p in policies if p not in POLICIES]
        if unknown:
            raise ValueError(f"--policy: expected some of {', '.join(POLICIES)}, got {', '.join(unknown)}")
        for name, value, least in (("--dim", dim or 1, 1), ("--value-bytes", value_bytes, 1),
                                   ("--key-bytes", key_bytes, 0),
                                   ("--metadata-bytes", metadata_bytes, 0), ("--wire-value-bytes", wire_value_bytes, 1),
                                   ("--refresh-iterations", refresh, 1), ("--workers", workers, 1),
                                   ("--batch-events", batch_events, 1)):
            if value < least:
                raise ValueError(f"{name}: expected >= {least}, got {value}")
        if warmup is not None and warmup < 1:
            raise ValueError(f"--warmup-iterations: expected >= 1, got {warmup}")
        if not ss_counters >= 1:
            raise ValueError(f"--ss-counters: expected >= 1 counter per switch entry, got {ss_counters}")
        chunk_rows, progress = _streaming_options(streaming, source, column, chunk_rows, progress)
        if streaming:
            _check_streaming_source(source, column, kind)
        from ddlscope.skew.offload import SwitchLayout

        budgets = [parse_bytes(b) for b in budget] if budget else None

        def check_budgets(layout: SwitchLayout) -> None:
            for text, b in zip(budget or [], budgets or [], strict=True):
                if b < layout.entry_bytes:
                    raise ValueError(
                        f"--budget {text}: holds no switch entry; an entry takes {layout.entry_bytes} B "
                        f"({layout.embedding_dim} x {value_bytes} B values + {key_bytes} B key + {metadata_bytes} B "
                        f"metadata): give at least {layout.entry_bytes}B")

        if dim is not None:  # known before the source is read
            check_budgets(SwitchLayout(dim, value_bytes, key_bytes, metadata_bytes, wire_value_bytes))

        from ddlscope.report.console import emit

        if streaming:
            res, source_name, num_keys, replay_notes, chosen = _offload_streamed(
                source, column, dim, value_bytes, key_bytes, metadata_bytes, wire_value_bytes, check_budgets, budgets,
                policies, warmup, refresh, ss_counters, workers, batch_events, chunk_rows, progress and fmt == "table")
        else:
            res, source_name, num_keys, replay_notes, chosen = _offload_in_memory(
                source, column, kind, dim, value_bytes, key_bytes, metadata_bytes, wire_value_bytes, check_budgets,
                budgets, policies, warmup, refresh, ss_counters, workers, batch_events)
        cols = ["policy", "budget_bytes", "capacity_keys", "push_aggregated_fraction", "pull_served_fraction",
                "server_updates_saved_fraction", "server_bytes_saved_fraction", "switch_installs"]
        cols += [c for c in ("latency_mean_us_before", "latency_mean_us_after", "latency_speedup")
                 if c in res.table.columns]
        if fmt == "table":
            emit(res.table.select(cols), "table",
                 title=f"Switch offload what-if: {source_name} ({num_keys:,} keys, "
                       f"{res.evaluation_iterations} evaluated iterations)",
                 extra={"embedding dimension": f"{chosen.dim} ({chosen.source})",
                        "notes": " | ".join([*replay_notes, *res.notes])})
        else:
            emit(res.table, fmt, extra=None if fmt == "csv" else {
                **{k: v for k, v in res.summary().items() if k != "curve"},
                "embedding_dim": chosen.dim, "embedding_dim_source": chosen.source,
                "embedding_dim_detail": chosen.detail})
        if report is not None:
            path = _write_report(report, overwrite, "offload_report", res, source_name)
            err_console.print(f"report: {path}")


def _warn_dim(chosen) -> None:
    """The embedding dimension's warning (assumed) or note (read from the log) on stderr."""
    from ddlscope.cli.common import err_console

    if chosen.assumed:
        err_console.print(f"[yellow]warning:[/yellow] {chosen.detail}")
    elif chosen.source != "option":
        err_console.print(f"note: {chosen.detail}")


def _offload_streamed(source: Path, column: str, dim: int | None, value_bytes: int, key_bytes: int,
                      metadata_bytes: int, wire_value_bytes: int, check_budgets: Callable, budgets: list[int] | None,
                      policies: tuple[str, ...], warmup: int | None, refresh: int, ss_counters: float, workers: int,
                      batch_events: int, chunk_rows: int, show_progress: bool):
    """``rpc offload --streaming``: :func:`ddlscope.skew.offload_streaming.simulate_offload_streaming`
    with a progress line per pass on stderr. Returns ``(result, source name, distinct keys, replay
    notes, embedding dimension)``, as :func:`_offload_in_memory`."""
    from ddlscope.cli.common import err_console
    from ddlscope.skew.offload import SwitchLayout, choose_embedding_dim
    from ddlscope.skew.offload_streaming import simulate_offload_streaming

    chosen = choose_embedding_dim(dim, None, None, wire_value_bytes)  # a column has no message sizes
    _warn_dim(chosen)
    layout = SwitchLayout(chosen.dim, value_bytes, key_bytes, metadata_bytes, wire_value_bytes)
    check_budgets(layout)
    with _batch_progress(show_progress, lambda name: "rows" if name.startswith("read") else "pushes") as on_batch:
        s = simulate_offload_streaming(source, column, layout, budgets, policies, warmup, refresh, ss_counters,
                                       workers, batch_events, chunk_rows, on_batch)
    err_console.print(f"streamed: {s.rows:,} rows of {len(s.files)} file(s) in {s.batches} batch(es), "
                      f"{s.spill_bytes / 2**20:,.1f} MiB spilled, {s.passes} replay(s), {s.wall_s:.1f} s "
                      "(exact: equal to the in-memory simulation)")
    return s.result, s.source, s.num_keys, [s.replay_note], chosen


def _offload_in_memory(source: Path, column: str | None, kind: str, dim: int | None, value_bytes: int,
                       key_bytes: int, metadata_bytes: int, wire_value_bytes: int, check_budgets: Callable,
                       budgets: list[int] | None, policies: tuple[str, ...], warmup: int | None, refresh: int,
                       ss_counters: float, workers: int, batch_events: int):
    """``rpc offload``: read the whole source, replay a raw stream as training, simulate; with an
    RPC log, the latency estimate from its stage breakdown. Returns ``(result, source name,
    distinct keys, replay notes, embedding dimension)``."""
    from ddlscope.cli.common import err_console
    from ddlscope.rpc import decompose
    from ddlscope.skew.offload import SwitchLayout, budgets_for, choose_embedding_dim, prepare_trace, simulate_offload
    from ddlscope.skew.streams import (
        emulate_training,
        load_stream,
        read_rpc_log_with_keys,
        replay_hint,
        resolve_kind,
    )

    resolved = resolve_kind(source, kind, column)
    _warn_if_table_read_as_text(source, kind, resolved)
    log_read = read_rpc_log_with_keys(source) if resolved == "rpc_log" else None  # one read: keys and stages
    stream = log_read.stream if log_read is not None else load_stream(source, resolved, column)
    if (hint := replay_hint(stream, workers, batch_events)) is not None:
        raise ValueError(f"{stream.source}: the offload simulation needs at least 2 iterations (warm-up + "
                         f"evaluation): {hint}")
    chosen = choose_embedding_dim(dim, source if resolved == "rpc_log" else None,
                                  log_read.log.frame if log_read is not None and log_read.log is not None else None,
                                  wire_value_bytes)
    _warn_dim(chosen)
    layout = SwitchLayout(chosen.dim, value_bytes, key_bytes, metadata_bytes, wire_value_bytes)
    check_budgets(layout)
    trained = emulate_training(stream, workers=workers, batch_events=batch_events)
    trace = prepare_trace(trained)
    budgets = budgets or budgets_for(stream.num_keys, layout)
    stages = None
    if log_read is not None and log_read.log is None:
        err_console.print(f"note: no latency estimate ({log_read.log_error})")
    elif log_read is not None and log_read.log is not None:
        log = log_read.log
        try:
            stages = decompose(log.frame)
        except ValueError as exc:
            err_console.print(f"note: no latency estimate ({exc})")
        if stages is not None and log.rejected.height:
            err_console.print(
                f"note: latency estimate from {log.frame.height:,} RPCs; {log.rejected.height:,} rejected "
                "rows of the log left out (ddlscope rpc dissect lists them with file:line and reason)")
    res = simulate_offload(trace, layout, budgets, policies, warmup, refresh, stages, ss_counters)
    return res, stream.source, trace.num_keys, trained.notes[len(stream.notes):], chosen
