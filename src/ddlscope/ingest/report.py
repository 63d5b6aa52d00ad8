"""The accounting of one ingest: where every row of the trace went.

:class:`IngestReport` holds, per input file, how many data rows, blank lines and malformed rows
it had; every malformed row with file, line and problem; the per-reason counts of the job
population; and notes on what was joined or inferred. It is plain data (Polars tables and
strings); ``ddlscope.report`` renders it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ddlscope.ingest.population import GPU_NOT_IN_CATALOG, duration_counts
from ddlscope.ingest.table import MALFORMED_SCHEMA, TableRead, empty_malformed

ATTRIBUTED = "attributed"
"""The row label of attributed jobs in :meth:`IngestReport.summary`."""

#: Columns of :attr:`IngestReport.tables`.
TABLES_SCHEMA: dict[str, pl.DataType] = {
    "table": pl.String,
    "file": pl.String,
    "data_rows": pl.Int64,
    "blank_lines": pl.Int64,
    "malformed_rows": pl.Int64,
    "duplicate_rows": pl.Int64,
    "superseded_rows": pl.Int64,
    "used_rows": pl.Int64,
    "unmatched_rows": pl.Int64,
}


class NoAttributableJobsError(ValueError):
    """A trace none of whose jobs can be evaluated; the message gives the reasons and the fix."""


@dataclass
class IngestReport:
    """What became of every row of a trace.

    Attributes:
        fmt: the trace format read (``pai-v2020``, ``gavel``, ``philly-pollux``, ...).
        sources: the input paths.
        tables: one row per input file, columns :data:`TABLES_SCHEMA`: ``data_rows`` (lines that
            are neither header nor blank) = ``used_rows`` + ``malformed_rows`` +
            ``duplicate_rows`` (exact repeats of an earlier line, not used) + ``superseded_rows``
            (replaced by a later record of the same key, e.g. a restarted PAI instance; the
            reader's note gives its rule); ``unmatched_rows``
            of the used rows refer to no job (e.g. PAI task rows of a job not in the job table;
            null where the table is the job list itself).
        malformed: every malformed row, columns ``table, file, line, problem, detail, text``.
        by_reason: per reason (``attributed`` for attributed jobs): ``jobs``, ``share_jobs``,
            ``gpu_time_s``, ``share_gpu_time`` (shares of the jobs with a known GPU time).
        notes: sentences on joins, inference and data quality (orphan rows, repeated rows, and the
            :meth:`duration_note` when some job has no duration).
        jobs: rows of the population.
        attributed_jobs: attributed rows.
        jobs_without_duration: rows whose ``duration_s`` is null (the trace gives no run time);
            their ``gpu_time_s`` is null too unless the trace gives it.
        attributed_jobs_without_duration: the attributed ones among them.
    """

    fmt: str
    sources: list[str]
    tables: pl.DataFrame
    malformed: pl.DataFrame
    by_reason: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    jobs: int = 0
    attributed_jobs: int = 0
    jobs_without_duration: int = 0
    attributed_jobs_without_duration: int = 0
    unknown_gpus: list[tuple[str, int]] = field(default_factory=list)

    @classmethod
    def build(
        cls, fmt: str, sources: list[str], reads: list[TableRead], population: pl.DataFrame,
        notes: list[str] | None = None, unmatched: Mapping[str, int] | None = None,
    ) -> IngestReport:
        """The report of ``population`` read from ``reads`` (one per file); ``unmatched``: table ->
        used rows that refer to no job."""
        malformed = pl.concat([r.malformed for r in reads])
        malformed = malformed.sort("table", "file", "line") if malformed.height else empty_malformed()
        counts = malformed.group_by("table", "file").agg(malformed_rows=pl.len().cast(pl.Int64))
        tables = pl.DataFrame(
            [{"table": r.table, "file": r.file, "data_rows": r.data_rows, "blank_lines": r.blank_lines,
              "duplicate_rows": r.duplicate_rows, "superseded_rows": r.superseded_rows} for r in reads],
            schema={k: TABLES_SCHEMA[k] for k in ("table", "file", "data_rows", "blank_lines", "duplicate_rows",
                                                  "superseded_rows")},
        )
        tables = tables.join(counts, on=["table", "file"], how="left").with_columns(
            pl.col("malformed_rows").fill_null(0)
        ).with_columns(
            used_rows=pl.col("data_rows") - pl.col("malformed_rows") - pl.col("duplicate_rows")
            - pl.col("superseded_rows"),
            unmatched_rows=pl.col("table").replace_strict(
                list(unmatched or {}), list((unmatched or {}).values()), default=None, return_dtype=pl.Int64
            ),
        )
        no_duration, attributed_no_duration = duration_counts(population)
        report = cls(
            fmt=fmt, sources=sources, tables=tables.select(list(TABLES_SCHEMA)), malformed=malformed,
            by_reason=reason_summary(population), notes=list(notes or []),
            jobs=population.height, attributed_jobs=int(population["attributed"].sum() or 0),
            jobs_without_duration=no_duration, attributed_jobs_without_duration=attributed_no_duration,
            unknown_gpus=_unknown_gpus(population),
        )
        note = report.duration_note()
        if note:
            report.notes.append(note)
        gpus = report.unknown_gpu_text()
        if gpus:
            report.notes.append(f"GPU type(s) not in the catalog (jobs): {gpus}")
        return report

    def unknown_gpu_text(self, first: int = 5) -> str | None:
        """The GPU names of the jobs whose reason is ``GPU type not in catalog``, most jobs first,
        the first ``first`` with their job counts (``"K80 (12), M60 (3) and 2 more"``); ``None``
        when there are none."""
        if not self.unknown_gpus:
            return None
        shown = ", ".join(f"{name} ({n:,})" for name, n in self.unknown_gpus[:first])
        more = len(self.unknown_gpus) - first
        return shown + (f" and {more} more" if more > 0 else "")

    def duration_note(self) -> str | None:
        """The sentence counting the jobs without a known duration (``None`` when there are none).

        Neutral: it states the fact (``duration_s`` and ``gpu_time_s`` null), not a weight, because
        the weight is the aggregate's choice (``ddlscope characterize`` estimates it from the job's
        steps where the trace gives them and says so)."""
        if not self.jobs_without_duration:
            return None
        return (f"{self.jobs_without_duration:,} job(s) without a known duration in the trace "
                f"({self.attributed_jobs_without_duration:,} of them attributed): duration_s and gpu_time_s are null")

    # -- views ------------------------------------------------------------------------------------
    def summary(self) -> pl.DataFrame:
        """Jobs per reason: ``reason`` (``attributed`` first), ``jobs``, ``share_jobs``,
        ``gpu_time_s``, ``share_gpu_time``."""
        return self.by_reason

    def malformed_summary(self, examples: int = 3) -> pl.DataFrame:
        """Malformed rows per (table, problem): ``rows`` and the first ``examples`` locations as
        ``file:line`` with what was found (``file:line`` alone where the row has no detail)."""
        if self.malformed.height == 0:
            return pl.DataFrame(schema={"table": pl.String, "problem": pl.String, "rows": pl.Int64,
                                        "examples": pl.String})
        return (
            self.malformed.sort("table", "file", "line")
            .group_by("table", "problem", maintain_order=True)
            .agg(
                rows=pl.len().cast(pl.Int64),
                # a row without a detail still counts as an example (pl.format of a null is null)
                examples=pl.when(pl.col("detail").is_null()).then(pl.format("{}:{}", "file", "line"))
                .otherwise(pl.format("{}:{} ({})", "file", "line", "detail")).head(examples).str.join("; "),
            )
            .sort("table", "problem")
        )

    @property
    def malformed_rows(self) -> int:
        """All malformed rows of all files."""
        return self.malformed.height

    def headline(self) -> str:
        """One sentence: jobs, attributed, malformed rows."""
        pct = 100.0 * self.attributed_jobs / self.jobs if self.jobs else 0.0
        return (
            f"{self.jobs:,} job{'' if self.jobs == 1 else 's'} read ({self.fmt}): "
            f"{self.attributed_jobs:,} attributed ({pct:.1f} %), "
            f"{self.jobs - self.attributed_jobs:,} not attributed; {self.malformed_rows:,} malformed row(s)"
        )

    def no_jobs_message(self) -> str | None:
        """``None`` when some job is attributed, else an explanation: the reasons with their
        counts and what to do about the main one."""
        if self.attributed_jobs:
            return None
        where = ", ".join(self.sources[:3]) + (f" and {len(self.sources) - 3} more" if len(self.sources) > 3 else "")
        if self.jobs == 0:
            rows = int(self.tables["data_rows"].sum()) if self.tables.height else 0
            if rows == 0:
                return f"no job could be read from {where}: no data row (a header only, or blank lines)"
            see = " (see the malformed-row report)" if self.malformed_rows else ""
            return f"no job could be read from {where}: {rows:,} data row(s), {self.malformed_rows:,} malformed{see}"
        parts = [f"{r['reason']}: {r['jobs']:,}" for r in self.by_reason.iter_rows(named=True)]
        top = self.by_reason["reason"][0]
        hint = _HINTS.get(top, "See docs/ingest.md for the rules.")
        if top == GPU_NOT_IN_CATALOG and self.unknown_gpus:
            hint = f"GPU type(s) the catalog does not know (jobs): {self.unknown_gpu_text()}. {hint}"
        subject, verb = ("the one job", "cannot") if self.jobs == 1 else (f"none of the {self.jobs:,} jobs", "can")
        return (
            f"{subject} of {where} {verb} be attributed to a workload "
            f"({'; '.join(parts)}). {hint}"
        )

    def require_attributed(self) -> None:
        """Raise :class:`NoAttributableJobsError` (with :meth:`no_jobs_message`) when no job is
        attributed; do nothing otherwise."""
        msg = self.no_jobs_message()
        if msg:
            raise NoAttributableJobsError(msg)

    def to_dict(self, examples: int = 3) -> dict[str, Any]:
        """JSON-ready summary: format, sources, jobs, attributed_jobs, malformed_rows,
        jobs_without_duration, attributed_jobs_without_duration, by_reason, tables, malformed
        summary, notes."""
        return {
            "format": self.fmt,
            "sources": self.sources,
            "jobs": self.jobs,
            "attributed_jobs": self.attributed_jobs,
            "malformed_rows": self.malformed_rows,
            "jobs_without_duration": self.jobs_without_duration,
            "attributed_jobs_without_duration": self.attributed_jobs_without_duration,
            "by_reason": self.by_reason.to_dicts(),
            "tables": self.tables.to_dicts(),
            "malformed": self.malformed_summary(examples).to_dicts(),
            "notes": self.notes,
        }


_HINTS: Mapping[str, str] = {
    "no model label": "The trace names no model: assign one with a model mix (--model-mix "
    "resnet50=0.5,bert_base=0.5; model_mix= in the API) or map a model column (--map model=COLUMN).",
    "no workload tag": "Only jobs with a workload tag in pai_group_tag_table name their model: "
    "assign the others with a model mix (--model-mix ...; model_mix= in the API).",
    "label not mapped to a zoo model": "Map the trace's labels to zoo models with a model-map file "
    "(--model-map FILE; [models] label = \"zoo_name\").",
    "GPU type not in catalog": "Add the GPU to the catalog (--catalog FILE) or map it to a known one.",
    "no GPU requested": "The trace holds CPU-only jobs only.",
}


def _unknown_gpus(population: pl.DataFrame) -> list[tuple[str, int]]:
    """(trace GPU name, jobs) of the jobs not attributed for ``GPU type not in catalog``, most first."""
    if population.height == 0 or "trace_gpu" not in population.columns:
        return []
    counts = (population.filter(pl.col("reason") == GPU_NOT_IN_CATALOG)
              .group_by("trace_gpu").agg(jobs=pl.len().cast(pl.Int64)).sort(-pl.col("jobs"), "trace_gpu"))
    return [(str(g), int(n)) for g, n in counts.iter_rows()]


def reason_summary(population: pl.DataFrame) -> pl.DataFrame:
    """Jobs and GPU time per reason (``attributed`` for attributed jobs), most jobs first after
    ``attributed``. Shares of GPU time are of the jobs whose GPU time is known."""
    if population.height == 0:
        return pl.DataFrame(schema={"reason": pl.String, "jobs": pl.Int64, "share_jobs": pl.Float64,
                                    "gpu_time_s": pl.Float64, "share_gpu_time": pl.Float64})
    known = population["gpu_time_s"].drop_nulls()
    total_time = known.sum() if known.len() else None
    time = pl.col("gpu_time_s")
    out = (
        population.group_by(reason=pl.col("reason").fill_null(ATTRIBUTED))
        .agg(jobs=pl.len().cast(pl.Int64),
             gpu_time_s=pl.when(time.is_not_null().any()).then(time.sum()).otherwise(None).cast(pl.Float64))
        .with_columns(
            share_jobs=pl.col("jobs") / population.height,
            share_gpu_time=(pl.col("gpu_time_s") / total_time) if total_time else pl.lit(None, dtype=pl.Float64),
        )
        .sort(pl.col("reason") != ATTRIBUTED, -pl.col("jobs"), "reason")
    )
    return out.select("reason", "jobs", "share_jobs", "gpu_time_s", "share_gpu_time")


__all__ = ["ATTRIBUTED", "MALFORMED_SCHEMA", "IngestReport", "NoAttributableJobsError", "reason_summary"]
