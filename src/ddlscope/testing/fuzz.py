"""Fuzz targets for every reader: a real (or small built) input, seeded mutations, and the check.

A :class:`FuzzTarget` names a reader, the clean inputs it starts from (:class:`Sample`), the
mutations it is fed (:data:`~ddlscope.testing.mutate.TEXT_MUTATIONS` for text,
:data:`~ddlscope.testing.mutate.BINARY_MUTATIONS` plus :data:`PARQUET_SCHEMA_MUTATIONS` for
Parquet) and a ``read`` function that runs the reader on a mutated file and returns its
:class:`Accounting`. :func:`run_trial` mutates one sample with one seed and classifies the outcome:

* ``clean_error``: the reader raised a user error (``ValueError``, ``FileNotFoundError``,
  ``OSError``) whose message is one line naming the file;
* ``balanced``: it returned, and rows in (counted from the mutated file, independently of the
  reader) = rows used + rows rejected, every rejected row with a reason;
* ``failure``: anything else (a traceback, an error that does not name the file, a message of
  several lines, rows dropped silently); the trial keeps the seed and mutation names to replay it.

:data:`READER_TARGETS` builds the targets of the reading layer's users (ingest generic tables,
RPC CSV/JSON lines/Parquet, skew streams); ``benchmarks/fuzz_readers.py`` runs them, and the
test suite runs each with a short hypothesis budget.
"""

from __future__ import annotations

import io
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ddlscope.testing.mutate import BINARY_MUTATIONS, TEXT_MUTATIONS, Mutation, mutate

USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, OSError)
"""The exceptions the CLI turns into one red line (``cli.common.user_errors``); every fuzz module
(:mod:`ddlscope.testing.fuzz_ingest`, :mod:`ddlscope.testing.fuzz_specs`,
:mod:`ddlscope.measure.fuzz`, :mod:`ddlscope.rpc.fuzz`) checks errors against this tuple."""


def user_error_problem(exc: BaseException, names: list[str] | tuple[str, ...]) -> str | None:
    """What is wrong with a reader's error, or ``None`` for a clean one: one of :data:`USER_ERRORS`,
    whose message is one line naming one of ``names`` (file or folder paths, or bare file names)
    and is not one of ddlscope's own ``internal error`` guards."""
    msg = str(exc).strip()
    kind = type(exc).__name__
    if not isinstance(exc, USER_ERRORS):
        return f"{kind} is not a user error: {msg.splitlines()[0][:300] if msg else ''}"
    if "\n" in msg:
        return f"{kind} of several lines: {msg[:300]!r}"
    if not any(n in msg for n in names):
        return f"{kind} not naming the file ({', '.join(names)}): {msg[:300]}"
    if any(f"{n}: internal error" in msg for n in names):  # ddlscope's own guards say so
        return f"internal error: {msg[:300]}"
    return None


@dataclass(frozen=True)
class Sample:
    """A clean input: its name (the file name the mutated copy gets) and bytes."""

    name: str
    data: bytes


@dataclass(frozen=True)
class Accounting:
    """What a reader did with a file's rows.

    Attributes:
        rows_in: data rows of the mutated file, counted from its bytes (not by the reader).
        used: rows the reader kept.
        rejected: rows it rejected or skipped, each counted under a reason.
        unexplained: rejected rows without a reason (must be 0).
    """

    rows_in: int
    used: int
    rejected: int
    unexplained: int = 0

    @property
    def balanced(self) -> bool:
        """rows in = used + rejected, and every rejection has a reason."""
        return self.rows_in == self.used + self.rejected and self.unexplained == 0


@dataclass(frozen=True)
class FuzzTarget:
    """One reader under fuzzing.

    Attributes:
        name: how reports name it.
        samples: a function giving the clean inputs (called once per run; may read shared data).
        read: runs the reader on a mutated file (``path``, its bytes) and returns its
            :class:`Accounting`; raises the reader's errors.
        mutations: name -> mutation (:data:`~ddlscope.testing.mutate.Mutation`).
        max_rounds: mutations applied one after the other: 1 to ``max_rounds``, drawn per seed.
    """

    name: str
    samples: Callable[[], list[Sample]]
    read: Callable[[Path, bytes], Accounting]
    mutations: dict[str, Mutation] = field(default_factory=lambda: dict(TEXT_MUTATIONS))
    max_rounds: int = 2


@dataclass(frozen=True)
class Trial:
    """The outcome of one mutated input: ``clean_error``, ``balanced`` or ``failure``, with the
    seed, the sample and the mutations applied (to replay it) and what happened."""

    target: str
    seed: int
    sample: str
    mutations: tuple[str, ...]
    outcome: str
    detail: str

    def replay(self) -> str:
        """How to replay the trial."""
        return f"{self.target} seed={self.seed} sample={self.sample} mutations={','.join(self.mutations)}"


def apply_mutations(data: bytes, seed: int, table: dict[str, Mutation], max_rounds: int) -> tuple[bytes, list[str]]:
    """Mutate ``data``: the text table through :func:`~ddlscope.testing.mutate.mutate` (so the same
    seed gives the same bytes as there), any other table the same way (a
    :class:`random.Random` of ``seed`` chooses each mutation and its place)."""
    rounds = 1 + seed % max(max_rounds, 1)
    if table == TEXT_MUTATIONS:
        return mutate(data, seed, rounds=rounds)
    rng = random.Random(seed)
    applied = []
    for _ in range(rounds):
        name = rng.choice(tuple(table))
        data = table[name](data, rng)
        applied.append(name)
    return data, applied


def run_trial(target: FuzzTarget, seed: int, workdir: Path, samples: list[Sample] | None = None) -> Trial:
    """Mutate one sample of ``target`` (chosen by ``seed``) and classify what its reader does.

    The mutated file is written to ``workdir`` under the sample's name (a name ``folder/file`` makes
    the folder) and removed afterwards.
    """
    samples = samples if samples is not None else target.samples()
    sample = samples[seed % len(samples)]
    data, applied = apply_mutations(sample.data, seed, target.mutations, target.max_rounds)
    path = workdir / sample.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    # a sample in a folder (``folder/file``) is read with that folder; its errors may name the folder
    names = [sample.name] if path.parent == workdir else [sample.name, str(path.parent)]

    def trial(outcome: str, detail: str) -> Trial:
        return Trial(target.name, seed, sample.name, tuple(applied), outcome, detail)

    try:
        acc = target.read(path, data)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        problem = user_error_problem(exc, names)
        if problem is not None:
            return trial("failure", problem)
        return trial("clean_error", str(exc).strip()[:300])
    finally:
        path.unlink(missing_ok=True)
    if not acc.balanced:
        return trial("failure", f"unbalanced: rows in {acc.rows_in}, used {acc.used}, rejected {acc.rejected}, "
                                f"without a reason {acc.unexplained}")
    return trial("balanced", f"rows in {acc.rows_in} = used {acc.used} + rejected {acc.rejected}")


# ---- counting rows independently of the readers ------------------------------------------------

def text_lines(data: bytes) -> list[bytes]:
    """The physical lines of a text file: split on LF, a final LF ends the last line, trailing
    CRs dropped, a UTF-8 byte-order mark at the start removed."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [ln.rstrip(b"\r") for ln in lines]


def csv_rows(data: bytes, header: bool = True) -> int:
    """Data rows of a delimited file: non-empty lines, less the header."""
    lines = text_lines(data)
    n = sum(1 for ln in lines if ln)
    if header and lines:
        n -= 1 if lines[0] else 0
        # a header-less first line is blank: the reader's header is then an empty name
    return max(n, 0)


def jsonl_rows(data: bytes) -> int:
    """Data rows of a JSON-lines file: lines holding anything but white space."""
    return sum(1 for ln in data.split(b"\n") if ln.strip())


# ---- Parquet schema mutations (in Polars) -------------------------------------------------------

def _parquet_frame(data: bytes):  # -> pl.DataFrame | None
    import polars as pl

    try:
        return pl.read_parquet(io.BytesIO(data))
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        return None


def _parquet_bytes(frame) -> bytes:
    buf = io.BytesIO()
    frame.write_parquet(buf)
    return buf.getvalue()


def _schema_mutation(fn: Callable) -> Mutation:
    def mutation(data: bytes, rng: random.Random) -> bytes:
        frame = _parquet_frame(data)
        if frame is None or frame.width == 0:
            return data
        return _parquet_bytes(fn(frame, rng))

    mutation.__doc__ = fn.__doc__
    return mutation


def _drop_column(frame, rng):
    """Drop one column."""
    return frame.drop(rng.choice(frame.columns))


def _duplicate_column(frame, rng):
    """Add a copy of one column under another name (``<name>_copy``)."""
    c = rng.choice(frame.columns)
    return frame.with_columns(frame[c].alias(f"{c}_copy"))


def _rename_column(frame, rng):
    """Rename one column (``<name>_renamed``)."""
    c = rng.choice(frame.columns)
    return frame.rename({c: f"{c}_renamed"})


def _numeric_columns(frame) -> list[str]:
    return [c for c, t in frame.schema.items() if t.is_numeric()]


def _non_finite(frame, rng):
    """Set 1 to 4 values of a numeric column to NaN, inf or -inf (the column becomes Float64)."""
    import polars as pl

    cols = _numeric_columns(frame)
    if not cols or frame.height == 0:
        return frame
    c = rng.choice(cols)
    values = frame[c].cast(pl.Float64).to_list()
    for _ in range(rng.randint(1, 4)):
        values[rng.randrange(len(values))] = rng.choice([float("nan"), float("inf"), float("-inf")])
    return frame.with_columns(pl.Series(c, values, dtype=pl.Float64))


def _huge(frame, rng):
    """Set 1 to 4 values of a numeric column to a huge one (2^63 - 1, -2^63, or 1e308 as Float64)."""
    import polars as pl

    cols = _numeric_columns(frame)
    if not cols or frame.height == 0:
        return frame
    c = rng.choice(cols)
    big = rng.choice([2**63 - 1, -(2**63), 1e308])
    dtype = pl.Float64 if isinstance(big, float) or not frame.schema[c].is_integer() else pl.Int64
    values = frame[c].cast(dtype).to_list()
    for _ in range(rng.randint(1, 4)):
        values[rng.randrange(len(values))] = big
    return frame.with_columns(pl.Series(c, values, dtype=dtype))


def _duplicate_name_mutation(data: bytes, rng: random.Random) -> bytes:
    """Write one column twice under the same name (pyarrow allows it; Polars refuses to read it)."""
    frame = _parquet_frame(data)
    if frame is None or frame.width == 0:
        return data
    import pyarrow as pa
    import pyarrow.parquet as pq

    c = rng.choice(frame.columns)
    table = frame.to_arrow()
    table = pa.table([*table.columns, table.column(c)], names=[*table.column_names, c])
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


PARQUET_SCHEMA_MUTATIONS: dict[str, Mutation] = {
    "drop_column": _schema_mutation(_drop_column),
    "duplicate_column": _schema_mutation(_duplicate_column),
    "duplicate_column_name": _duplicate_name_mutation,
    "rename_column": _schema_mutation(_rename_column),
    "non_finite_numbers": _schema_mutation(_non_finite),
    "huge_numbers": _schema_mutation(_huge),
}
"""Schema-level damage of a Parquet file, done in Polars (and pyarrow for a repeated name)."""

PARQUET_MUTATIONS: dict[str, Mutation] = {**BINARY_MUTATIONS, **PARQUET_SCHEMA_MUTATIONS}
"""Everything a Parquet reader is fed: bytes damaged, and schemas changed."""


def parquet_rows(data: bytes, clean_rows: int) -> int:
    """Rows of a (mutated) Parquet file: the rows of the frame it holds when it still reads, else
    the clean sample's (a reader that returns rows from a damaged file must return them all)."""
    frame = _parquet_frame(data)
    return frame.height if frame is not None else clean_rows


# ---- the reading layer's users ------------------------------------------------------------------

def _shared(*parts: str) -> Path:
    from ddlscope.shared_data import find_shared_data

    root = find_shared_data()
    if root is None:
        raise FileNotFoundError("shared/data not found (set DDLSCOPE_SHARED_DATA)")
    return root.joinpath(*parts)


def _head_lines(path: Path, n: int) -> bytes:
    """The first ``n`` lines of a file (its header included)."""
    lines = path.read_bytes().split(b"\n")
    return b"\n".join(lines[:n]) + b"\n"


def _ingest_accounting(pop, report) -> tuple[int, int, int]:
    import polars as pl

    t = report.tables
    malformed = int(t["malformed_rows"].sum()) if t.height else 0
    duplicates = int(t["duplicate_rows"].sum()) if t.height else 0
    unexplained = int(report.malformed.select(pl.col("problem").is_null().sum()).item()) \
        if report.malformed.height else 0
    return pop.height, malformed + duplicates, unexplained


def _ingest_target(name: str, fmt: str | None, mapping: list[str] | None, header: bool,
                   samples: Callable[[], list[Sample]]) -> FuzzTarget:
    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.ingest import parse_map_pairs, read_population

        pop, report = read_population(path, fmt=fmt, mapping=parse_map_pairs(mapping) if mapping else None)
        used, rejected, unexplained = _ingest_accounting(pop, report)
        return Accounting(csv_rows(data, header), used, rejected, unexplained)

    return FuzzTarget(name, samples, read)


def _philly_samples() -> list[Sample]:
    return [Sample("philly.csv", _head_lines(_shared("pollux", "philly.csv"), 60))]


def _gavel_samples() -> list[Sample]:
    folder = _shared("gavel_traces", "msr", "seed=0")
    files = sorted(folder.glob("*.trace"))[:3]
    return [Sample(f.name, _head_lines(f, 40)) for f in files]


def _summary_samples() -> list[Sample]:
    return [Sample(f.name, f.read_bytes()) for f in sorted(_shared("cluster_summaries").glob("*.csv"))]


_SUMMARY_MAP = ["job_id=id", "num_gpus=avg_gpu_num", "duration_s=avg_run_time_gpu"]


def _rpc_frame(n: int = 30, keys: bool = False):
    """A small synthetic RPC log (:func:`ddlscope.rpc.synthetic.synthetic_rpc_log`, seed 7) with,
    for ``keys``, a ``keys`` list column (up to 4 keys per sparse RPC) and ``table_id``."""
    import polars as pl

    from ddlscope.rpc.synthetic import synthetic_rpc_log

    frame = synthetic_rpc_log(n, seed=7, workers=4, servers=2)
    if keys:
        sparse = pl.col("op").cast(pl.String).str.ends_with("_sparse")
        frame = frame.with_columns(
            pl.when(sparse).then(pl.concat_list([(pl.col("rpc_id") * 7 + i) % 97 for i in range(4)]))
            .otherwise(None).alias("keys"),
            pl.when(sparse).then(pl.col("rpc_id") % 3).otherwise(None).alias("table_id"),
        )
    return frame


def _rpc_samples(fmt: str) -> Callable[[], list[Sample]]:
    def samples() -> list[Sample]:
        frame = _rpc_frame()
        if fmt == "csv":
            return [Sample("rpcs.csv", frame.write_csv().encode())]
        if fmt == "jsonl":
            return [Sample("rpcs.jsonl", frame.write_ndjson().encode())]
        return [Sample("rpcs.parquet", _parquet_bytes(frame))]

    return samples


def _rpc_target(fmt: str) -> FuzzTarget:
    clean_rows = 30

    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.rpc.readers import read_rpc_log

        log = read_rpc_log(path)
        rows = {"csv": lambda: csv_rows(data), "jsonl": lambda: jsonl_rows(data),
                "parquet": lambda: parquet_rows(data, clean_rows)}[fmt]()
        unexplained = int(log.rejected["reason"].null_count())
        return Accounting(rows, log.frame.height, log.rejected.height, unexplained)

    mutations = PARQUET_MUTATIONS if fmt == "parquet" else dict(TEXT_MUTATIONS)
    return FuzzTarget(f"rpc {fmt}", _rpc_samples(fmt), read, mutations)


def _stream_accounting(stream, rows_in: int) -> Accounting:
    return Accounting(rows_in, stream.used_rows, sum(stream.skipped.values()))


def _skew_update_samples() -> list[Sample]:
    import polars as pl

    # iteration, key, updates from the first 40 Criteo rows: key = C1 label hashed, updates = I2 (a count)
    frame = pl.read_csv(_shared("criteo", "criteo_sample.txt"), n_rows=40, infer_schema=False)
    table = frame.select(
        pl.int_range(pl.len()).floordiv(8).alias("iteration"),
        pl.col("C1").hash(seed=0).mod(1000).cast(pl.Int64).alias("key"),
        pl.col("I2").cast(pl.Int64, strict=False).fill_null(0).abs().alias("updates"),
    )
    return [Sample("updates.csv", table.write_csv().encode()), Sample("updates.jsonl", table.write_ndjson().encode())]


def _skew_update_target() -> FuzzTarget:
    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.skew.streams import read_update_table

        rows = jsonl_rows(data) if path.suffix == ".jsonl" else csv_rows(data)
        return _stream_accounting(read_update_table(path), rows)

    return FuzzTarget("skew update table", _skew_update_samples, read)


def _skew_update_parquet_target() -> FuzzTarget:
    def samples() -> list[Sample]:
        import polars as pl

        table = pl.read_csv(io.BytesIO(_skew_update_samples()[0].data))
        return [Sample("updates.parquet", _parquet_bytes(table))]

    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.skew.streams import read_update_table

        return _stream_accounting(read_update_table(path), parquet_rows(data, 40))

    return FuzzTarget("skew update table parquet", samples, read, PARQUET_MUTATIONS)


def _skew_column_target() -> FuzzTarget:
    def samples() -> list[Sample]:
        return [Sample("criteo_sample.txt", _head_lines(_shared("criteo", "criteo_sample.txt"), 60))]

    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.skew.streams import read_categorical_column

        return _stream_accounting(read_categorical_column(path, "C1"), csv_rows(data))

    return FuzzTarget("skew column", samples, read)


def _skew_rpc_keys_target(fmt: str) -> FuzzTarget:
    def samples() -> list[Sample]:
        frame = _rpc_frame(keys=True)
        if fmt == "jsonl":
            return [Sample("keys.jsonl", frame.write_ndjson().encode())]
        return [Sample("keys.parquet", _parquet_bytes(frame))]

    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.skew.streams import read_rpc_log_keys

        rows = jsonl_rows(data) if fmt == "jsonl" else parquet_rows(data, 30)
        return _stream_accounting(read_rpc_log_keys(path), rows)

    return FuzzTarget(f"skew rpc keys {fmt}", samples, read,
                      PARQUET_MUTATIONS if fmt == "parquet" else dict(TEXT_MUTATIONS))


def _skew_text_target() -> FuzzTarget:
    def samples() -> list[Sample]:
        return [Sample("tinyshakespeare.txt", _shared("text", "tinyshakespeare.txt").read_bytes()[:4000])]

    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.skew.streams import read_text_tokens

        stream = read_text_tokens(path)
        tokens = sum(len(re.findall(r"[a-z]+", ln.lower())) for ln in data.decode("utf-8").splitlines())
        return _stream_accounting(stream, tokens)

    return FuzzTarget("skew text", samples, read)


READER_TARGETS: dict[str, Callable[[], FuzzTarget]] = {
    "ingest philly": lambda: _ingest_target("ingest philly", "philly-pollux", None, True, _philly_samples),
    "ingest gavel": lambda: _ingest_target("ingest gavel", "gavel", None, False, _gavel_samples),
    "ingest cluster summary": lambda: _ingest_target("ingest cluster summary", "csv", _SUMMARY_MAP, True,
                                                     _summary_samples),
    "rpc csv": lambda: _rpc_target("csv"),
    "rpc jsonl": lambda: _rpc_target("jsonl"),
    "rpc parquet": lambda: _rpc_target("parquet"),
    "skew update table": _skew_update_target,
    "skew update table parquet": _skew_update_parquet_target,
    "skew column": _skew_column_target,
    "skew rpc keys jsonl": lambda: _skew_rpc_keys_target("jsonl"),
    "skew rpc keys parquet": lambda: _skew_rpc_keys_target("parquet"),
    "skew text": _skew_text_target,
}
"""The reading layer's users as fuzz targets, by name (each a function building the target)."""

__all__ = ["PARQUET_MUTATIONS", "PARQUET_SCHEMA_MUTATIONS", "READER_TARGETS", "USER_ERRORS", "Accounting",
           "FuzzTarget", "Sample", "Trial", "all_targets", "apply_mutations", "check_target", "csv_rows", "jsonl_rows",
           "parquet_rows", "run_trial", "text_lines", "user_error_problem"]


def all_targets() -> dict[str, Callable[[], FuzzTarget]]:
    """:data:`READER_TARGETS` and the other modules' readers
    (:data:`ddlscope.testing.fuzz_targets.ADAPTED_TARGETS`), by name."""
    from ddlscope.testing.fuzz_targets import ADAPTED_TARGETS

    return {**READER_TARGETS, **ADAPTED_TARGETS}


def check_target(name: str, workdir: Path, max_examples: int = 30) -> None:
    """Run the target ``name`` of :func:`all_targets` under hypothesis (seeds drawn from
    ``0..2^32-1``, ``max_examples`` of them, derandomized so the suite is repeatable) and fail on
    the first ``failure`` trial with its replay line. For the test suite; needs hypothesis.

    Raises:
        AssertionError: a trial failed (the message gives the seed and mutations to replay).
    """
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    target = all_targets()[name]()
    samples = target.samples()

    @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2**32 - 1))
    def check(seed: int) -> None:
        trial = run_trial(target, seed, workdir, samples)
        assert trial.outcome != "failure", f"{trial.replay()}: {trial.detail}"

    check()
