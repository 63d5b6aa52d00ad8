"""The other modules' readers as :class:`~ddlscope.testing.fuzz.FuzzTarget`\\ s: thin adapters over
the fuzz entry points those modules provide, so that ``benchmarks/fuzz_readers.py`` and
:func:`~ddlscope.testing.fuzz.check_target` run them like the reading layer's users.

Each adapter gives the clean samples, a ``read(path, data)`` that runs the module's own check and
returns an :class:`~ddlscope.testing.fuzz.Accounting` (a broken invariant that is not a row count,
such as a trace breakdown that does not add up, raises ``AssertionError``: a failure), and the
mutations:

========================= ======================================================================
target                    entry point, samples, accounting
========================= ======================================================================
kineto trace              :func:`ddlscope.measure.fuzz.check_kineto` on
                          :func:`~ddlscope.measure.fuzz.kineto_samples` (the smallest shared
                          trace, indented and one event per line); rows: trace events
kineto trace gz           the same, the one-event-per-line sample gzip-compressed, bytes damaged
                          (:data:`~ddlscope.testing.mutate.BINARY_MUTATIONS`)
kineto trace inferred     the same on :func:`~ddlscope.measure.fuzz.inferred_iterations_sample`
                          (no ProfilerStep markers; about 2 s a trial)
rules csv                 :func:`ddlscope.measure.fuzz.check_rules_csv` on
                          :func:`~ddlscope.measure.fuzz.rules_csv_sample`; rows: CSV records
nccl-tests output         :func:`ddlscope.calibrate.nccl_tests.fuzz_target` on
                          :func:`nccl_tests_samples`; rows: lines
otlp                      :func:`ddlscope.rpc.readers.read_rpc_log` counted by
                          :func:`ddlscope.rpc.fuzz.otlp_counts` on :func:`otlp_samples`; rows:
                          CLIENT/SERVER spans and lines that are not JSON objects
pai-v2020                 ``read_population`` of a PAI 2020 folder
                          (:func:`ddlscope.testing.fuzz_ingest.pai_sample_trace`) with one table
                          mutated, checked by :func:`~ddlscope.testing.fuzz_ingest.check_accounting`;
                          rows: table rows
ingest openb-v2023        the generic reader with the ``openb-v2023`` mapping on the first 500
                          lines of the real pod list, checked the same way
system / catalog /        :func:`ddlscope.testing.fuzz_specs.check_system_file`,
scenario toml             ``check_catalog_file``, ``check_scenario_file`` on the examples of
                          docs/model.md, with :func:`~ddlscope.testing.fuzz_specs.replace_value`
                          among the mutations; rows: the file's entries (1 system, the
                          ``[server.*]`` tables, the ``[[scenario]]`` entries)
measurement table csv     :func:`ddlscope.validate.measurements.read_measurements` on
                          :data:`MEASUREMENTS_SAMPLE`; rows: physical lines after the header, less
                          blank and ``#`` lines
========================= ======================================================================
"""

from __future__ import annotations

import gzip
import json
import tomllib
from collections.abc import Callable
from pathlib import Path

from ddlscope.testing.fuzz import Accounting, FuzzTarget, Sample, _shared
from ddlscope.testing.mutate import BINARY_MUTATIONS, TEXT_MUTATIONS

# ---- ddlscope trace: Kineto traces and --rules -------------------------------------------------


def _kineto_read(path: Path, data: bytes) -> Accounting:
    from ddlscope.measure.fuzz import check_kineto

    r = check_kineto(path)
    if r["residual_us"] >= 1e-6:
        raise AssertionError(f"the breakdown does not add up: residual {r['residual_us']} us")
    return Accounting(r["rows_in"], r["used"], r["rejected"])


def _kineto_target(form: str) -> FuzzTarget:
    from ddlscope.measure.fuzz import inferred_iterations_sample, kineto_samples

    root = _shared()
    if form == "inferred":
        return FuzzTarget("kineto trace inferred",
                          lambda: [Sample("resnet_cut.json", inferred_iterations_sample(root))], _kineto_read)
    if form == "gz":
        return FuzzTarget("kineto trace gz", lambda: [
            Sample("trace.json.gz", gzip.compress(kineto_samples(root)["lines.json"], mtime=0))],
            _kineto_read, dict(BINARY_MUTATIONS), max_rounds=1)
    return FuzzTarget("kineto trace", lambda: [Sample(n, d) for n, d in kineto_samples(root).items()], _kineto_read)


def _rules_target() -> FuzzTarget:
    from ddlscope.measure.fuzz import check_rules_csv, rules_csv_sample

    def read(path: Path, data: bytes) -> Accounting:
        r = check_rules_csv(path)
        return Accounting(r["rows_in"], r["used"], r["rejected"])

    return FuzzTarget("rules csv", lambda: [Sample("rules.csv", rules_csv_sample())], read, max_rounds=3)


# ---- nccl-tests output ---------------------------------------------------------------------------

_NCCL_HEADER = (
    "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place" + " " * 10 + "\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
    "     (us)  (GB/s)  (GB/s)       \n"
)
"""The column header of nccl-tests 2.13 (three comment lines)."""


def nccl_tests_run(binary: str, collective: str, ranks: int, alpha_us: float, bandwidth_gb_s: float,
                   max_bytes: int = 2**27, gpus_per_host: int = 8) -> str:
    """The output of one nccl-tests run (2.13 format: version, parameters, devices, the
    out-of-place / in-place table, ``Avg bus bandwidth`` footer) for sizes 8 B .. ``max_bytes``
    (factor 2), times ``t = alpha_us + f(p) S / bandwidth_gb_s`` (the in-place 0.3 % slower), and
    ``algbw = S / t``, ``busbw = f(p) algbw`` printed as nccl-tests prints them (NVIDIA/nccl-tests
    doc/PERFORMANCE.md; ``f(p)``: :func:`ddlscope.model.collectives.bus_factor`)."""
    from ddlscope.model.collectives import bus_factor

    f = bus_factor(collective, ranks)
    per_rank = collective in ("all_gather", "reduce_scatter", "all_to_all")
    sizes = [8 * 2**k for k in range(max_bytes.bit_length() - 3)]
    rows, busbw = [], []
    for s in sizes:
        t_us = alpha_us + f * s / (bandwidth_gb_s * 1e3)  # bytes / (GB/s * 1e3) = us
        row = f"{s:12d}  {s // 4 // (ranks if per_rank else 1):12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}"
        for t in (t_us, t_us * 1.003):
            alg = s / t / 1e3  # GB/s
            time = f"{t:7.0f}" if t >= 10000 else (f"{t:7.1f}" if t >= 100 else f"{t:7.2f}")
            row += f"  {time}  {alg:6.2f}  {alg * f:6.2f}  {'0':>5s}"
        busbw.append(s / t_us / 1e3 * f)
        rows.append(row + "\n")
    devices = "".join(f"#  Rank {r:2d} Group  0 Pid {41873 + r // gpus_per_host:6d} on node-{r // gpus_per_host:02d} "
                      f"device {r % gpus_per_host:2d} [0x{7 + 4 * (r % gpus_per_host):02x}] NVIDIA A100-SXM4-80GB\n"
                      for r in range(ranks))
    return ("# nccl-tests version 2.13.9 nccl-headers=21903 nccl-library=21903\n"
            f"# Collective test starting: {binary}\n"
            f"# nThread 1 nGpus 1 minBytes 8 maxBytes {sizes[-1]} step: 2(factor) warmup iters: 5 iters: 20 "
            "agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n" + devices + "#\n" + _NCCL_HEADER
            + "".join(rows) + "# Out of bounds values : 0 OK\n"
            f"# Avg bus bandwidth    : {sum(busbw) / len(busbw):.4f} \n#\n\n")


def nccl_tests_samples() -> list[Sample]:
    """Clean nccl-tests outputs (/work/shared/data holds none): an 8-GPU ``all_reduce_perf``
    (14 us + 1.75 S / 230 GB/s, NVSwitch-like), a 16-rank ``all_gather_perf`` (25 us, 23 GB/s,
    two hosts over InfiniBand), and both runs one after the other in one file."""
    ar = nccl_tests_run("all_reduce_perf", "all_reduce", 8, 14.0, 230.0)
    ag = nccl_tests_run("all_gather_perf", "all_gather", 16, 25.0, 23.0)
    return [Sample("all_reduce_perf.txt", ar.encode()), Sample("all_gather_perf.txt", ag.encode()),
            Sample("two_runs.txt", (ar + ag).encode())]


def _nccl_target() -> FuzzTarget:
    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.calibrate.nccl_tests import fuzz_target

        acc = fuzz_target(path)
        if not acc["tables"] or acc["unfittable_tables"] > acc["tables"]:
            raise AssertionError(f"read without a table, or more unfittable tables than tables: {acc}")
        lines = len(data.decode("utf-8", errors="replace").splitlines())  # as the reader decodes and splits
        rejected = (acc["row_lines_in_rejected_tables"] + sum(acc["rejected_rows"].values())
                    + sum(acc["skipped"].values()))
        return Accounting(lines, acc["row_lines_used"], rejected)

    return FuzzTarget("nccl-tests output", nccl_tests_samples, read)


# ---- OTLP JSON -------------------------------------------------------------------------------------

def otlp_samples() -> list[Sample]:
    """Clean OTLP JSON exports of a small synthetic RPC log (12 RPCs, 2 workers, 1 server;
    :func:`ddlscope.rpc.synthetic.synthetic_rpc_log` seed 7) written by ddlscope's own exporter
    (:func:`ddlscope.pstrain.otlp.otlp_traces`): one ``ExportTraceServiceRequest`` document, and the
    collector's file-exporter form (one request per line, one span each), as
    ``tests/rpc/data/pstrain_collector.json``."""
    import polars as pl

    from ddlscope.pstrain.logs import ITERATIONS
    from ddlscope.pstrain.otlp import otlp_traces
    from ddlscope.rpc.synthetic import synthetic_rpc_log

    doc = otlp_traces(synthetic_rpc_log(12, seed=7, workers=2, servers=1), pl.DataFrame(schema=ITERATIONS),
                      run_id="0123456789abcdef")
    lines = [json.dumps({"resourceSpans": [{"resource": rs["resource"],
                                            "scopeSpans": [{"scope": ss["scope"], "spans": [sp]}]}]})
             for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
    return [Sample("export.otlp.json", json.dumps(doc, indent=1).encode()),
            Sample("collector.json", ("\n".join(lines) + "\n").encode())]


def _otlp_target() -> FuzzTarget:
    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.rpc.fuzz import otlp_counts
        from ddlscope.rpc.readers import read_rpc_log

        log = read_rpc_log(path, input_format="otlp")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AssertionError(f"read a file that is not UTF-8 without an error: {exc}") from exc
        c = otlp_counts(log, text)
        return Accounting(c.spans + c.bad_lines, 2 * c.kept, 2 * c.row_rejected + c.span_rejected + c.line_rejected,
                          unexplained=abs(c.line_rejected - c.bad_lines))

    return FuzzTarget("otlp", otlp_samples, read, max_rounds=3)


# ---- cluster traces: PAI 2020 folders and the openb pod list -------------------------------------

def _population_accounting(population, report, files: dict[str, bytes], job_table: str) -> Accounting:
    from ddlscope.testing.fuzz_ingest import check_accounting

    totals = check_accounting(population, report, files, 0, Path("-"), [], job_table=job_table)
    return Accounting(totals["rows_in"], int(report.tables["used_rows"].sum()), totals["rejected"])


def _pai_target() -> FuzzTarget:
    tables: dict[str, bytes] = {}

    def samples() -> list[Sample]:
        import tempfile

        from ddlscope.testing.fuzz_ingest import pai_sample_trace

        with tempfile.TemporaryDirectory() as tmp:
            out = pai_sample_trace(_shared("alibaba", "v2020_schema"), Path(tmp) / "trace")
            tables.update({p.name: p.read_bytes() for p in sorted(out.glob("pai_*.csv"))})
        return [Sample(f"pai/{name}", data) for name, data in tables.items()]

    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.ingest import read_population

        files = {}
        for name, clean in tables.items():  # the other tables clean, next to the mutated one
            p = path.parent / name
            if p != path:
                p.write_bytes(clean)
            files[str(p)] = data if p == path else clean
        population, report = read_population(path.parent, "pai-v2020", statuses="all")
        return _population_accounting(population, report, files, "job")

    return FuzzTarget("pai-v2020", samples, read)


def _openb_target() -> FuzzTarget:
    def samples() -> list[Sample]:
        lines = _shared("alibaba", "v2023", "openb_pod_list_default.csv").read_bytes().split(b"\n")
        return [Sample("openb_pod_list_default.csv", b"\n".join(lines[:500]) + b"\n")]

    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.ingest import read_population

        population, report = read_population(path, "openb-v2023", model_mix="resnet50=1", statuses="all")
        return _population_accounting(population, report, {str(path): data}, "jobs")

    return FuzzTarget("ingest openb-v2023", samples, read)


# ---- spec files ------------------------------------------------------------------------------------

def _toml_entries(data: bytes, kind: str) -> int:
    """Entries of a spec file, by ``tomllib`` (the reader has loaded it, so it parses)."""
    doc = tomllib.loads(data.decode("utf-8"))
    if kind == "scenario":
        return len(doc.get("scenario", []))
    if kind == "catalog":
        return len(doc.get("server", {}))
    return 1


def _spec_target(kind: str) -> FuzzTarget:
    from ddlscope.testing import fuzz_specs

    check: Callable[[Path], int] = getattr(fuzz_specs, f"check_{kind}_file")
    example = getattr(fuzz_specs, f"{kind.upper()}_EXAMPLE")
    name = "scenarios.toml" if kind == "scenario" else f"{kind}.toml"

    def read(path: Path, data: bytes) -> Accounting:
        used = check(path)
        return Accounting(_toml_entries(data, kind), used, 0)

    mutations = {**TEXT_MUTATIONS, "replace_value": fuzz_specs.replace_value}
    return FuzzTarget(f"{kind} toml", lambda: [Sample(name, example.encode())], read, mutations)


# ---- ddlscope validate --measurements: a measurement table (CSV) -------------------------------------

MEASUREMENTS_SAMPLE = (
    "# a measurement table as docs/validation.md describes it\n"
    "model,gpu,gpus,servers,batch_per_gpu,precision,step_time_s,throughput,throughput_unit,seq_len,measured_sync_s,"
    "source\n"
    "resnet18_cifar,V100,1,1,32,fp32,0.05,,,,,a\n"
    "resnet50,A100-SXM4-80GB,8,1,256,fp16,,19000,images/s,,0.004,a\n"
    'bert_base,A100-SXM4-80GB,8,1,32,amp,,409600,tokens/s,128,0,"my, cluster"\n'
    "\n"
    "ncf,T4,4,2,1024,fp32,0.02,,,,0.01,b\n"
)
"""The clean measurement table of the ``measurement table csv`` target: four rows (one-GPU, multi-GPU,
tokens/s with a quoted source holding a comma, two servers), a comment and a blank line."""


def _measurement_rows_in(data: bytes) -> int:
    """Data rows of a measurement CSV counted from its bytes: its physical lines (split at LF, trailing
    CRs and a leading UTF-8 byte-order mark dropped) after the header, less blank lines (empty) and
    comments (first characters other than spaces and tabs ``#``); the header is the first line holding
    more than spaces and tabs that is not a comment (lines of only spaces or tabs before it are blank,
    after it rows; docs/validation.md). The reader reads one record a line: a quoted field spanning
    lines is an error."""
    lines = data.decode("utf-8", errors="replace").removeprefix("\ufeff").split("\n")
    if lines and lines[-1] == "":  # the newline ending the last line starts no line
        lines.pop()
    kept = [t for t in (line.rstrip("\r") for line in lines) if t and not t.lstrip(" \t").startswith("#")]
    while kept and not kept[0].strip(" \t"):  # before the header: blank
        kept.pop(0)
    return max(len(kept) - 1, 0)


def _measurements_target() -> FuzzTarget:
    def read(path: Path, data: bytes) -> Accounting:
        from ddlscope.validate.measurements import read_measurements

        t = read_measurements(path)  # reads and checks the rows; nothing is profiled
        return Accounting(_measurement_rows_in(data), t.rows.height, t.rejected.height,
                          int(t.rejected["reason"].is_null().sum()))

    return FuzzTarget("measurement table csv", lambda: [Sample("measurements.csv", MEASUREMENTS_SAMPLE.encode())],
                      read, max_rounds=3)


ADAPTED_TARGETS: dict[str, Callable[[], FuzzTarget]] = {
    "kineto trace": lambda: _kineto_target("json"),
    "kineto trace gz": lambda: _kineto_target("gz"),
    "kineto trace inferred": lambda: _kineto_target("inferred"),
    "rules csv": _rules_target,
    "nccl-tests output": _nccl_target,
    "otlp": _otlp_target,
    "pai-v2020": _pai_target,
    "ingest openb-v2023": _openb_target,
    "system toml": lambda: _spec_target("system"),
    "catalog toml": lambda: _spec_target("catalog"),
    "scenario toml": lambda: _spec_target("scenario"),
    "measurement table csv": _measurements_target,
}
"""The other modules' readers as fuzz targets, by name (each a function building the target)."""

__all__ = ["ADAPTED_TARGETS", "nccl_tests_run", "nccl_tests_samples", "otlp_samples"]
