"""Fuzz cases of the cluster-trace readers (:mod:`ddlscope.ingest`), one function per reader.

Each ``fuzz_*`` function takes a real input, mutates one of its files with
:func:`ddlscope.testing.mutate.mutate` and a seed, runs the reader on it and checks the readers'
contract (docs/development.md): either a user error (``ValueError``, ``FileNotFoundError``,
``OSError``: what ``ddlscope``'s ``@user_errors`` turns into one red line) whose message is one
line naming the input, or a result whose accounting balances. Anything else raises
``AssertionError`` with the seed and the mutations applied, so a failure can be replayed. They
return a :class:`FuzzOutcome` (for a benchmark's counts).

- :func:`fuzz_pai_reader`: the PAI 2020 reader (``ddlscope.ingest.pai``) on a trace folder, e.g.
  :func:`pai_sample_trace` (built from the real schema and example rows of
  ``shared/data/alibaba/v2020_schema``);
- :func:`fuzz_openb_reader`: the generic-table reader with the ``openb-v2023`` mapping on the real
  pod list ``shared/data/alibaba/v2023/openb_pod_list_default.csv``.

The balance checked: per input file, data rows = used + malformed + exact duplicates + superseded
(each >= 0), data rows + blank lines = the file's lines (less a header line); the malformed rows
listed (with file and line) are those counted; one population row per used job-table row; every
job attributed or with a reason, and the per-reason counts sum to the jobs.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ddlscope.testing.fuzz import USER_ERRORS, user_error_problem
from ddlscope.testing.mutate import mutate

__all__ = ["USER_ERRORS", "FuzzOutcome", "check_accounting", "check_user_error", "fuzz_openb_reader",
           "fuzz_pai_reader", "pai_sample_trace"]


@dataclass
class FuzzOutcome:
    """What one fuzz case did.

    Attributes:
        seed: the seed given.
        mutated: the file mutated.
        mutations: names of the mutations applied (``ddlscope.testing.mutate.TEXT_MUTATIONS``).
        error: the user error's message, or ``None`` when the reader returned a result.
        jobs: population rows (0 on an error).
        rows_in: data rows of all input files (0 on an error).
        rejected: malformed + duplicate + superseded rows of all input files.
    """

    seed: int
    mutated: Path
    mutations: list[str]
    error: str | None = None
    jobs: int = 0
    rows_in: int = 0
    rejected: int = 0
    details: dict[str, int] = field(default_factory=dict)


def _fail(what: str, seed: int, mutated: Path, mutations: list[str]) -> AssertionError:
    return AssertionError(f"seed {seed}, {mutated.name} mutated by {', '.join(mutations)}: {what}")


def _physical_lines(data: bytes) -> int:
    """Lines of a text file as a reader sees them: ``\\n``-terminated, a last unterminated one counted;
    ``\\r\\n`` is one line end."""
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def check_user_error(exc: BaseException, names: list[str], seed: int, mutated: Path, mutations: list[str]) -> str:
    """Check a reader's error (:func:`ddlscope.testing.fuzz.user_error_problem`): a user error, one
    line, naming one of ``names`` (paths); its message.

    Raises:
        AssertionError: any other exception (chained), a message of several lines or none of the names.
    """
    problem = user_error_problem(exc, names)
    if problem is not None:
        raise _fail(problem, seed, mutated, mutations) from exc
    return str(exc)


def check_accounting(population: pl.DataFrame, report, files: dict[str, bytes], seed: int, mutated: Path,
                     mutations: list[str], job_table: str = "job") -> dict[str, int]:
    """Check that ``report`` (an :class:`~ddlscope.ingest.report.IngestReport`) accounts for every
    row of ``files`` (path -> the bytes read) and every job of ``population``; returns the totals.

    Raises:
        AssertionError: naming the first rule broken.
    """
    def fail(what: str) -> AssertionError:
        return _fail(what, seed, mutated, mutations)

    tables = report.tables
    for r in tables.iter_rows(named=True):
        parts = ("used_rows", "malformed_rows", "duplicate_rows", "superseded_rows")
        if any(r[k] is None or r[k] < 0 for k in (*parts, "data_rows", "blank_lines")):
            raise fail(f"{r['file']}: a negative or missing count: {r}")
        if r["data_rows"] != sum(r[k] for k in parts):
            raise fail(f"{r['file']}: data_rows {r['data_rows']} != used + malformed + duplicate + superseded: {r}")
        data = files.get(r["file"])
        if data is not None and not r["file"].endswith((".gz", ".parquet", ".pq")):
            lines = _physical_lines(data)
            seen = r["data_rows"] + r["blank_lines"]
            if seen not in (lines, lines - 1):  # less a header line
                raise fail(f"{r['file']}: {lines} lines, but {r['data_rows']} data rows + {r['blank_lines']} blank")
        listed = report.malformed.filter((pl.col("file") == r["file"]) & (pl.col("table") == r["table"])).height
        if listed != r["malformed_rows"]:
            raise fail(f"{r['file']}: {r['malformed_rows']} malformed rows counted, {listed} listed")
    m = report.malformed
    if m.height and (m["line"].null_count() or (m["line"] < 1).any() or m["problem"].null_count()):
        raise fail("a malformed row without a line (>= 1) or a problem")
    jobs_used = tables.filter(pl.col("table") == job_table)["used_rows"].sum()
    if population.height != jobs_used:
        raise fail(f"{population.height} population rows for {jobs_used} used {job_table}-table rows")
    if population.height:
        attributed, reason = population["attributed"], population["reason"]
        if attributed.null_count() or (attributed == reason.is_not_null()).any():
            raise fail("a job both attributed and with a reason, or neither")
    by_reason = int(report.by_reason["jobs"].sum()) if report.by_reason.height else 0
    if by_reason != population.height or report.jobs != population.height:
        raise fail(f"reasons count {by_reason} jobs, the report {report.jobs}, the population {population.height}")
    return {"rows_in": int(tables["data_rows"].sum()),
            "rejected": int((tables["malformed_rows"] + tables["duplicate_rows"] + tables["superseded_rows"]).sum())}


# -- the PAI 2020 reader -------------------------------------------------------------------------------

def _readme_examples(readme: str) -> dict[str, list[str]]:
    """``## pai_<table>`` section -> the example entry's values, in the table's column order."""
    out: dict[str, list[str]] = {}
    for section in re.split(r"^## ", readme, flags=re.M)[1:]:
        name = section.split("\n", 1)[0].strip()
        rows = re.findall(r"^\|\s*([A-Za-z_]+)\s*\|\s*(.*?)\s*\|\s*$", section, flags=re.M)
        values = [v for k, v in rows if k != "Columns"]
        if name.startswith("pai_") and values:
            out[name] = values
    return out


def pai_sample_trace(schema_dir: str | Path, out: str | Path, jobs: int = 24) -> Path:
    """Write a PAI 2020 trace to ``out`` from the real schema folder
    (``shared/data/alibaba/v2020_schema``: the ``.header`` files and the README's example entry of
    each table; the raw tables themselves are not public files of the data folder).

    Each table file starts with its real header line and the README's example row (those rows do
    not join each other, as in the trace's README); then ``jobs`` jobs derived from the example
    rows that join through job, task, instance, sensor, group tag and machine tables, with each
    status, several task names (``tensorflow``, ``worker`` + ``ps``, ``PyTorchWorker``), GPU requests
    (50, 100, 200, 800 % of a GPU) and GPU types (T4, V100, V100M32, MISC). Deterministic.

    Returns:
        ``out``.
    """
    schema_dir, out = Path(schema_dir), Path(out)
    examples = _readme_examples((schema_dir / "README.md").read_text())
    out.mkdir(parents=True, exist_ok=True)
    heads = {stem: (schema_dir / f"{stem}.header").read_text().strip() for stem in examples}
    rows: dict[str, list[str]] = {stem: [",".join(values)] for stem, values in examples.items()}
    job, task, inst = examples["pai_job_table"], examples["pai_task_table"], examples["pai_instance_table"]
    sensor, tag, spec = examples["pai_sensor_table"], examples["pai_group_tag_table"], examples["pai_machine_spec"]
    statuses = ("Terminated", "Terminated", "Failed", "Running", "Waiting", "Terminated")
    tasks = (("tensorflow",), ("worker", "ps"), ("PyTorchWorker",), ("worker",))
    gpus = ("100.0", "50.0", "200.0", "800.0")
    types = ("V100", "T4", "V100M32", "MISC")
    workloads = ("nmt", "bert", "resnet", "ctr", "", "graphlearn")
    for i in range(jobs):
        name, inst_id, machine = f"{job[0][:-4]}{i:04x}", f"{job[1][:-4]}{i:04x}", f"{spec[0][:-2]}{i % 7:02x}"
        status, start = statuses[i % len(statuses)], 4550879.0 + 1000 * i
        end = "" if status in ("Running", "Waiting") else f"{start + 537 + 10 * i:.1f}"
        rows["pai_job_table"].append(",".join([name, inst_id, job[2], status, f"{start:.1f}", end]))
        tag_row = [inst_id, tag[1], types[i % len(types)], tag[3], workloads[i % len(workloads)]]
        rows["pai_group_tag_table"].append(",".join(tag_row))
        if status == "Waiting":
            continue  # a waiting job has no task yet
        for t, task_name in enumerate(tasks[i % len(tasks)]):
            n = 1 + (i + t) % 3
            plan = "" if task_name == "ps" else gpus[i % len(gpus)]
            gtype = "" if task_name == "ps" else types[i % len(types)]
            rows["pai_task_table"].append(",".join([name, task_name, f"{n:.1f}", status, f"{start:.1f}", end,
                                                    task[6], task[7], plan, gtype]))
            for k in range(n):
                worker = f"{inst[3][:-6]}{i:04x}{t}{k}"
                i_end = end or ""
                rows["pai_instance_table"].append(",".join([name, task_name, f"{inst[2][:-6]}{i:04x}{t}{k}", worker,
                                                            inst_id, status, f"{start + 5:.1f}", i_end, machine]))
                if plan:
                    rows["pai_sensor_table"].append(",".join([name, task_name, worker, inst_id, machine,
                                                              f"/dev/nvidia{k}", *sensor[6:]]))
    for m in range(7):
        rows["pai_machine_spec"].append(",".join([f"{spec[0][:-2]}{m:02x}", types[m % len(types)], spec[2], spec[3],
                                                  "8" if m % 2 else spec[4]]))
    for stem, lines in rows.items():
        (out / f"{stem}.csv").write_text("\n".join([heads[stem], *lines]) + "\n")
    return out


def fuzz_pai_reader(trace_dir: str | Path, seed: int, workdir: str | Path) -> FuzzOutcome:
    """One fuzz case of the PAI 2020 reader: copy the trace folder's ``pai_*.csv`` tables to
    ``workdir/pai-<seed>``, mutate one of them (chosen by the seed) with
    :func:`~ddlscope.testing.mutate.mutate`, read it with
    :func:`ddlscope.ingest.read_population` (format ``pai-v2020``, every status) and check the
    contract (module docstring).

    Raises:
        AssertionError: the reader broke the contract (the message gives the seed and mutations).
    """
    from ddlscope.ingest import read_population

    src = sorted(Path(trace_dir).glob("pai_*.csv"))
    if not src:
        raise FileNotFoundError(f"{trace_dir}: no pai_*.csv table")
    case = Path(workdir) / f"pai-{seed}"
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir(parents=True)
    target = src[seed % len(src)]
    files: dict[str, bytes] = {}
    mutations: list[str] = []
    for p in src:
        data = p.read_bytes()
        if p == target:
            data, mutations = mutate(data, seed)
        (case / p.name).write_bytes(data)
        files[str(case / p.name)] = data
    mutated = case / target.name
    try:
        population, report = read_population(case, "pai-v2020", statuses="all")
    except Exception as exc:  # any: the contract decides which are allowed
        msg = check_user_error(exc, [str(case)], seed, mutated, mutations)
        return FuzzOutcome(seed, mutated, mutations, error=msg)
    totals = check_accounting(population, report, files, seed, mutated, mutations, job_table="job")
    return FuzzOutcome(seed, mutated, mutations, jobs=population.height, **totals)


def fuzz_openb_reader(pod_list: str | Path, seed: int, workdir: str | Path, max_lines: int = 2000) -> FuzzOutcome:
    """One fuzz case of the generic-table reader with the built-in ``openb-v2023`` mapping: the first
    ``max_lines`` lines of a real pod list (``shared/data/alibaba/v2023/openb_pod_list_default.csv``),
    mutated, written to ``workdir/openb-<seed>/``, read with a model mix (so jobs attribute) and every
    status; the contract of the module docstring.

    Raises:
        AssertionError: the reader broke the contract.
    """
    from ddlscope.ingest import read_population

    lines = Path(pod_list).read_bytes().split(b"\n")
    data, mutations = mutate(b"\n".join(lines[:max_lines]) + b"\n", seed)
    case = Path(workdir) / f"openb-{seed}"
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir(parents=True)
    path = case / Path(pod_list).name
    path.write_bytes(data)
    try:
        population, report = read_population(path, "openb-v2023", model_mix="resnet50=1", statuses="all")
    except Exception as exc:
        msg = check_user_error(exc, [str(path)], seed, path, mutations)
        return FuzzOutcome(seed, path, mutations, error=msg)
    totals = check_accounting(population, report, {str(path): data}, seed, path, mutations, job_table="jobs")
    return FuzzOutcome(seed, path, mutations, jobs=population.height, **totals)
