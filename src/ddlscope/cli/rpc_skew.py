"""``ddlscope rpc skew`` and ``ddlscope rpc offload``: parameter-update skew and the switch what-if."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.console import Console

from ddlscope.cli.common import FormatOpt, user_errors
from ddlscope.report.console import emit
from ddlscope.rpc import decompose, read_rpc_log
from ddlscope.skew.frequency import DEFAULT_WINDOW_EVENTS, analyze_skew
from ddlscope.skew.offload import (
    DEFAULT_KEY_BYTES,
    DEFAULT_METADATA_BYTES,
    DEFAULT_SPACE_SAVING_COUNTERS,
    DEFAULT_VALUE_BYTES,
    POLICIES,
    SwitchLayout,
    budgets_for,
    prepare_trace,
    simulate_offload,
)
from ddlscope.skew.streams import SOURCE_KINDS, emulate_training, load_stream, with_vocabulary

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(text: str) -> int:
    """``'256KiB'`` -> 262144. Units: B, kB/MB/GB (powers of 1000), KiB/MiB/GiB (powers of 1024);
    a bare number is bytes.

    Raises:
        ValueError: anything else (the message shows the accepted forms).
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise ValueError(f"--budget {text!r}: expected a size like 262144, 256KiB, 1MiB or 4MB")
    return int(float(m.group(1)) * _UNITS[unit])


SourceArg = Annotated[Path, typer.Argument(help="RPC log with keys (.parquet/.jsonl), per-key update-count table "
                                                "(.parquet), a CSV/Parquet table with --column, or a text file")]
ColumnOpt = Annotated[str | None, typer.Option("--column", "-c", help="categorical column to read as the key stream "
                                                                      "(e.g. C1 of a Criteo CSV)")]
KindOpt = Annotated[str, typer.Option("--kind", help=f"source kind: {', '.join(SOURCE_KINDS)}")]
VocabularyOpt = Annotated[Path | None, typer.Option("--vocabulary", help="table naming integer keys (key, "
                                                                         "optional table_id, label/feature/token "
                                                                         "column), e.g. ps-train's "
                                                                         "vocabulary.parquet")]
ReportOpt = Annotated[Path | None, typer.Option("--report", "-o", help="write an HTML report folder here")]


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
                                                                          "of the distinct keys")] = 0.01,
        support: Annotated[int | None, typer.Option("--support", help="ranks of the Zipf fit, e.g. the table's "
                                                                      "rows (default: distinct keys seen)")] = None,
        top: Annotated[int, typer.Option("--top", help="most frequent keys to print")] = 15,
        vocabulary: VocabularyOpt = None,
        report: ReportOpt = None,
        fmt: FormatOpt = "table",
    ) -> None:
        """Per-key update frequency: rank-frequency, Zipf fit with goodness of fit, coverage of the
        top 0.1/1/10 % of keys, reuse distance and hot-set churn.

        Text files are tokenised as lower-cased runs of the letters a-z.
        """
        stream = load_stream(source, kind, column)
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
            from ddlscope.report.skew import skew_report  # matplotlib: imported only when needed

            path = skew_report(a, report)
            Console(stderr=True).print(f"report: {path}", soft_wrap=True)

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
        dim: Annotated[int, typer.Option("--dim", help="embedding dimension (values per row)")] = 64,
        value_bytes: Annotated[int, typer.Option("--value-bytes", help="bytes per value in the switch (32-bit "
                                                                       "integer registers)")] = DEFAULT_VALUE_BYTES,
        key_bytes: Annotated[int, typer.Option("--key-bytes", help="per-entry key bytes")] = DEFAULT_KEY_BYTES,
        metadata_bytes: Annotated[int, typer.Option("--metadata-bytes", help="per-entry metadata bytes (worker "
                                                                             "bitmap + counter)")
                                  ] = DEFAULT_METADATA_BYTES,
        wire_value_bytes: Annotated[int, typer.Option("--wire-value-bytes", help="bytes per value on the wire "
                                                                                 "(4 fp32, 2 fp16)")] = 4,
        warmup: Annotated[int | None, typer.Option("--warmup-iterations", help="iterations that only train the "
                                                                                "policies (default 10 %)")] = None,
        refresh: Annotated[int, typer.Option("--refresh-iterations", help="re-install the hot set every N "
                                                                          "iterations")] = 1,
        ss_counters: Annotated[float, typer.Option("--ss-counters", help="Space-Saving counters per switch entry")
                               ] = DEFAULT_SPACE_SAVING_COUNTERS,
        workers: Annotated[int, typer.Option("--workers", help="workers, to replay a raw stream as training")] = 8,
        batch_events: Annotated[int, typer.Option("--batch-events", help="events per worker mini-batch when "
                                                                         "replaying a raw stream")] = 1024,
        report: ReportOpt = None,
        fmt: FormatOpt = "table",
    ) -> None:
        """Simulate a programmable switch holding a hot set within a memory budget: pushes
        aggregated, pulls served, server updates and bytes saved, per policy and budget; with an
        RPC log, the latency gain from its stage breakdown.

        A raw stream (text, a column) is replayed as data-parallel training first (--workers,
        --batch-events).
        """
        stream = load_stream(source, kind, column)
        trained = emulate_training(stream, workers=workers, batch_events=batch_events)
        trace = prepare_trace(trained)
        layout = SwitchLayout(dim, value_bytes, key_bytes, metadata_bytes, wire_value_bytes)
        budgets = [parse_bytes(b) for b in budget] if budget else budgets_for(stream.num_keys, layout)
        stages = None
        if stream.kind == "rpc_log":
            try:
                log = read_rpc_log(source)
                stages = decompose(log.frame)
                if log.rejected.height:
                    Console(stderr=True).print(
                        f"note: latency estimate from {log.frame.height:,} RPCs; {log.rejected.height:,} rejected "
                        "rows of the log left out (ddlscope rpc dissect lists them with file:line and reason)",
                        soft_wrap=True)
            except ValueError as exc:
                Console(stderr=True).print(f"note: no latency estimate ({exc})")
        res = simulate_offload(trace, layout, budgets, tuple(policy) if policy else POLICIES, warmup, refresh,
                               stages, ss_counters)
        cols = ["policy", "budget_bytes", "capacity_keys", "push_aggregated_fraction", "pull_served_fraction",
                "server_updates_saved_fraction", "server_bytes_saved_fraction", "switch_installs"]
        cols += [c for c in ("latency_mean_us_before", "latency_mean_us_after", "latency_speedup")
                 if c in res.table.columns]
        if fmt == "table":
            emit(res.table.select(cols), "table",
                 title=f"Switch offload what-if: {stream.source} ({trace.num_keys:,} keys, "
                       f"{res.evaluation_iterations} evaluated iterations)",
                 extra={"notes": " | ".join([*trained.notes[len(stream.notes):], *res.notes]),
                        "simulated events/s (per budget pass)": {k: round(v) for k, v in res.events_per_s.items()}})
        else:
            emit(res.table, fmt, extra=None if fmt == "csv" else {k: v for k, v in res.summary().items()
                                                                   if k != "curve"})
        if report is not None:
            from ddlscope.report.skew import offload_report  # matplotlib: imported only when needed

            path = offload_report(res, stream.source, report)
            Console(stderr=True).print(f"report: {path}", soft_wrap=True)
