"""The PAI 2020 reader on the hand-written fixture trace of pai_fixture.py: one job per rule, one row
per malformed-row path. Every expected number is worked out from the fixture rows in comments."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import polars as pl
import pytest
from pai_fixture import JOB, TABLES, TASK, by_job, write_pai

from ddlscope.ingest import POPULATION_SCHEMA, read_population
from ddlscope.ingest.pai import find_tables
from ddlscope.specs.architecture import Architecture

GIB = 2**30


@pytest.fixture
def population(pai_dir):
    return read_population(pai_dir)


def test_schema_and_order(population):
    pop, _ = population
    assert list(pop.columns) == list(POPULATION_SCHEMA)
    assert dict(pop.schema) == {c: t for c, (t, _) in POPULATION_SCHEMA.items()}
    # one row per valid job-table row, in file order (j01..j12 on lines 1-12, blank line 13, j13.. on 14-25)
    assert pop["job_id"].to_list() == [f"j{i:02d}" for i in range(1, 25)]
    assert pop["line"].to_list() == [*range(1, 13), *range(14, 26)]
    assert pop["source"].unique().to_list() == [str(Path(pop["source"][0]))]


def test_inference_rules(population):
    pop, _ = population
    rows = by_job(pop)
    # j01: one 'tensorflow' instance with plan_gpu 100 -> 1w1g, 1 GPU
    r = rows["j01"]
    assert (r["architecture"], r["num_workers"], r["gpus_per_worker"], r["num_ps"], r["num_servers"], r["num_gpus"],
            r["model"], r["attributed"]) == ("1w1g", 1, 1, 0, 1, 1, "bert_base", True)
    # j02: one instance with plan_gpu 400 -> ceil(400/100) = 4 GPUs in one worker -> allreduce_local (default rule)
    assert rows["j02"]["architecture"] == "allreduce_local"
    assert (rows["j02"]["num_workers"], rows["j02"]["gpus_per_worker"], rows["j02"]["num_gpus"]) == (1, 4, 4)
    # j03: ps task (2 instances) + worker task (4 x 100) -> ps_worker, 4 workers, 2 PS; workers on m3, m3, m4, m4
    # -> 2 machines
    r = rows["j03"]
    assert (r["architecture"], r["num_workers"], r["gpus_per_worker"], r["num_ps"], r["num_servers"]) == (
        "ps_worker", 4, 1, 2, 2)
    # j04: 4 PyTorchWorker instances x 200 on m1, m1, m4, m4 -> allreduce_cluster 4 x 2 = 8 GPUs on 2 servers
    # (8 % 2 = 0)
    r = rows["j04"]
    assert (r["architecture"], r["num_workers"], r["gpus_per_worker"], r["num_gpus"], r["num_servers"]) == (
        "allreduce_cluster", 4, 2, 8, 2)
    # j05: 2 workers x 100 both on m5 -> allreduce_local, one server
    r = rows["j05"]
    assert (r["architecture"], r["num_workers"], r["num_gpus"], r["num_servers"]) == ("allreduce_local", 2, 2, 1)
    # j13: 3 workers on m3, m3, m4: 3 GPUs do not split evenly over 2 machines -> servers left to the model
    r = rows["j13"]
    assert (r["architecture"], r["num_gpus"], r["num_servers"]) == ("allreduce_cluster", 3, None)
    # j15: 2 workers x 1 GPU, no instance rows -> placement unknown -> as few servers as fit: 2 <= 8 GPUs of one
    # server -> allreduce_local on 1 server
    r = rows["j15"]
    assert (r["architecture"], r["num_gpus"], r["num_servers"], r["server_gpus"]) == (
        "allreduce_local", 2, 1, None)
    # j16: chief (1 x 100) + worker (2 x 100) on m1 -> 3 workers, one machine; the evaluator's GPU is not a worker
    # but counts in the GPU request: 1 + 2 + 1 = 4
    r = rows["j16"]
    assert (r["architecture"], r["num_workers"], r["num_gpus"], r["num_servers"], r["gpu_request"]) == (
        "allreduce_local", 3, 3, 1, 4.0)
    # j17: worker_name w17 restarted (m1 at 100, m4 at 300): the later start is kept -> one machine, m4 (8 GPUs)
    r = rows["j17"]
    assert (r["architecture"], r["num_servers"], r["server_gpus"]) == ("1w1g", 1, 8)


def test_gpu_types_durations_and_gpu_time(population):
    pop, _ = population
    rows = by_job(pop)
    # catalog aliases: V100 -> V100-SXM2-16GB, V100M32 -> V100-SXM2-32GB, P100 -> P100-PCIE-16GB, T4 -> T4
    assert {j: rows[j]["gpu"] for j in ("j01", "j02", "j05", "j06")} == {
        "j01": "V100-SXM2-16GB", "j02": "V100-SXM2-32GB", "j05": "P100-PCIE-16GB", "j06": "T4"}
    # run time = max(end) - min(start) of the worker instances; gpu_time = duration x gpu_request
    expected = {
        "j01": (1700 - 1100, 1.0),   # 600 s x 1 GPU
        "j02": (5000 - 2000, 4.0),   # 3000 s x 4
        "j03": (1100 - 100, 4.0),    # workers 100..1100 (the ps instances do not count); ps plan_gpu empty = 0
        "j04": (1500 - 500, 8.0),    # 4 x 200 % = 8 GPUs
        "j05": (190 - 120, 2.0),
        "j06": (500 - 100, 0.5),     # plan_gpu 50 = half a GPU
        "j13": (30 - 10, 3.0),
        "j15": (400 - 100, 2.0),     # no instances: the worker task's times
        "j16": (2000 - 1000, 4.0),
        "j17": (900 - 300, 1.0),     # the restarted instance only
    }
    for job, (duration, gpus) in expected.items():
        assert rows[job]["duration_s"] == duration, job
        assert rows[job]["gpu_request"] == gpus, job
        assert rows[job]["gpu_time_s"] == duration * gpus, job
    # server_gpus from the machine spec: m1..m4 8 GPUs, m5 and m6 2
    assert (rows["j01"]["server_gpus"], rows["j05"]["server_gpus"], rows["j06"]["server_gpus"]) == (8, 2, 2)
    # sensors: j01 util 40 %, peak 2.0 GiB; j03 workers w03c/w03d: mean(20, 30) = 25 %, max(1.5, 2.5) GiB
    assert rows["j01"]["measured_gpu_util_percent"] == 40.0
    assert rows["j01"]["measured_peak_gpu_memory_bytes"] == 2.0 * GIB
    assert rows["j03"]["measured_gpu_util_percent"] == 25.0
    assert rows["j03"]["measured_peak_gpu_memory_bytes"] == 2.5 * GIB
    assert rows["j02"]["measured_gpu_util_percent"] is None  # its sensor row is malformed ('n/a')


def test_models_from_workload_tags(population):
    pop, _ = population
    rows = by_job(pop)
    assert {j: rows[j]["model"] for j in ("j01", "j02", "j03", "j04", "j05", "j13")} == {
        "j01": "bert_base", "j02": "resnet50", "j03": "dlrm", "j04": "gcn_reddit", "j05": "transformer_nmt",
        "j13": "resnet50"}
    assert rows["j09"]["trace_model"] == "xlnet" and rows["j09"]["model"] is None
    assert rows["j08"]["trace_model"] is None


def test_reasons_and_counts(population):
    pop, report = population
    reasons = dict(zip(pop["job_id"], pop["reason"], strict=True))
    assert {j for j, r in reasons.items() if r is None} == {
        "j01", "j02", "j03", "j04", "j05", "j06", "j13", "j15", "j16", "j17"}
    assert reasons["j07"] == "GPU type not in catalog"          # gpu_type MISC
    assert reasons["j08"] == "no workload tag"                  # tag row with empty workload
    assert reasons["j09"] == "label not mapped to a zoo model"  # xlnet
    assert reasons["j10"] == "no GPU requested"                 # plan_gpu empty
    assert reasons["j11"] == "GPUs only on non-training tasks"  # evaluator only
    assert reasons["j12"] == "excluded by status: Waiting"  # (and no task rows): a Waiting job never ran
    for j in ("j14", "j18", "j19", "j20", "j21"):  # abc, -100, 2.5 instances, 4 fields, duplicate task
        assert reasons[j] == "malformed task row", j
    assert reasons["j22"] == reasons["j23"] == "malformed instance row"  # end < start; 8 fields
    assert reasons["j24"] == "malformed group_tag row"
    summary = dict(zip(report.summary()["reason"], report.summary()["jobs"], strict=True))
    assert summary == {
        "attributed": 10, "malformed task row": 5, "malformed instance row": 2, "GPU type not in catalog": 1,
        "GPUs only on non-training tasks": 1, "label not mapped to a zoo model": 1, "malformed group_tag row": 1,
        "no GPU requested": 1, "excluded by status: Waiting": 1, "no workload tag": 1}
    assert report.jobs == 24 and report.attributed_jobs == 10
    # GPU time of the attributed jobs: 600 + 12000 + 4000 + 8000 + 140 + 200 + 60 + 600 + 4000 + 600
    attributed = report.summary().filter(pl.col("reason") == "attributed")
    assert attributed["gpu_time_s"][0] == 30200.0


def test_every_row_accounted_for(population):
    _, report = population
    t = {r["table"]: r for r in report.tables.iter_rows(named=True)}
    # job: 31 lines = 30 data rows + 1 blank; 6 malformed; 24 jobs
    assert (t["job"]["data_rows"], t["job"]["blank_lines"], t["job"]["malformed_rows"], t["job"]["used_rows"]) == (
        30, 1, 6, 24)
    assert (t["task"]["data_rows"], t["task"]["malformed_rows"], t["task"]["unmatched_rows"]) == (28, 5, 1)
    assert (t["instance"]["data_rows"], t["instance"]["malformed_rows"], t["instance"]["unmatched_rows"]) == (27, 2, 1)
    # j17's w17 restarted: its first run (line 23) is superseded; 27 - 2 malformed - 1 superseded = 24 used
    assert (t["instance"]["superseded_rows"], t["instance"]["duplicate_rows"], t["instance"]["used_rows"]) == (1, 0, 24)
    assert (t["group_tag"]["data_rows"], t["group_tag"]["malformed_rows"], t["group_tag"]["unmatched_rows"]) == (
        19, 1, 1)
    assert (t["sensor"]["data_rows"], t["sensor"]["malformed_rows"], t["sensor"]["unmatched_rows"]) == (6, 1, 1)
    assert (t["machine_spec"]["data_rows"], t["machine_spec"]["malformed_rows"]) == (8, 2)
    assert "machine_metric" not in t
    m = report.malformed
    where = {(r["table"], r["line"]): r["problem"] for r in m.iter_rows(named=True)}
    assert where == {
        ("job", 26): "wrong field count",
        ("job", 27): "unparsable number",
        ("job", 28): "unknown status",
        ("job", 29): "duplicate key",
        ("job", 30): "end before start",
        ("job", 31): "missing key",
        ("task", 14): "unparsable number",
        ("task", 20): "negative value",
        ("task", 21): "count not a whole number",
        ("task", 22): "wrong field count",
        ("task", 24): "duplicate key",
        ("instance", 25): "end before start",
        ("instance", 26): "wrong field count",
        ("group_tag", 18): "wrong field count",
        ("sensor", 2): "unparsable number",
        ("machine_spec", 7): "negative value",
        ("machine_spec", 8): "duplicate key",
    }
    row = m.filter((pl.col("table") == "job") & (pl.col("line") == 26)).row(0, named=True)
    assert row["detail"] == "expected 6 fields, got 7" and row["text"] == "j90,id90,u1,Terminated,1,2,extra"
    row = m.filter((pl.col("table") == "task") & (pl.col("line") == 14)).row(0, named=True)
    assert row["detail"] == "column plan_gpu: expected a number, got 'abc'"
    assert row["text"] == "j14,worker,1.0,Terminated,1,2,600,10,abc,V100"
    summary = report.malformed_summary(examples=2)
    job_rows = summary.filter(pl.col("table") == "job")
    assert job_rows["rows"].sum() == 6
    assert "pai_job_table.csv:28 (status 'Exploded'; expected one of Running, Terminated, Failed, Waiting)" in \
        job_rows.filter(pl.col("problem") == "unknown status")["examples"][0]
    notes = " | ".join(report.notes)
    assert "pai_task_table: 1 row(s) with a job_name not in the job table" in notes
    assert "pai_sensor_table: 1 row(s) with a worker_name of no instance" in notes


def test_options_change_the_stated_rules(pai_dir):
    pop, _ = read_population(pai_dir, multi_gpu_instance="1wng")
    assert by_job(pop)["j02"]["architecture"] == "1wng"
    pop, report = read_population(pai_dir, fractional_gpus="exclude")
    r = by_job(pop)["j06"]
    assert r["reason"] == "fractional GPU request" and r["shared_gpu"] is True
    assert report.attributed_jobs == 9
    # a mix names the model of untagged jobs only: j08 (empty tag); j09 keeps its unmapped label
    pop, report = read_population(pai_dir, model_mix={"gpt2": 1.0})
    rows = by_job(pop)
    assert (rows["j08"]["model"], rows["j08"]["model_source"], rows["j08"]["attributed"]) == ("gpt2", "mix", True)
    assert rows["j09"]["reason"] == "label not mapped to a zoo model"
    assert rows["j01"]["model_source"] == "trace"
    # a user label map: xlnet -> bert_large
    pop, _ = read_population(pai_dir, model_map={"xlnet": "bert_large"})
    assert by_job(pop)["j09"]["model"] == "bert_large"


def test_shared_gpu_flag(population):
    pop, _ = population
    assert pop.filter(pl.col("shared_gpu"))["job_id"].to_list() == ["j06"]


def test_compressed_tables_and_header_line(tmp_path):
    d = write_pai(tmp_path / "pai", {k: v for k, v in TABLES.items() if k not in ("pai_job_table", "pai_task_table")})
    # the job table as distributed: a .tar.gz holding pai_job_table.csv
    data = JOB.encode()
    with tarfile.open(d / "pai_job_table.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("pai_job_table.csv")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    # the task table gzip-compressed, with its .header line prepended (detected and skipped)
    header = "job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type\n"
    with gzip.open(d / "pai_task_table.csv.gz", "wt") as fh:
        fh.write(header + TASK)
    _, report = read_population(d)
    assert report.attributed_jobs == 10 and report.jobs == 24
    t = {r["table"]: r for r in report.tables.iter_rows(named=True)}
    assert t["task"]["data_rows"] == 28
    # line numbers count the header line: the unparsable plan_gpu row is now line 15
    assert report.malformed.filter(pl.col("table") == "task")["line"].sort().to_list() == [15, 21, 22, 23, 25]


def test_minimal_trace_job_and_task_only(tmp_path):
    d = write_pai(tmp_path / "pai", {"pai_job_table": JOB, "pai_task_table": TASK})
    pop, report = read_population(d)
    rows = by_job(pop)
    # without instances, placement is unknown: as few servers as fit (8 GPUs each, the default)
    assert (rows["j03"]["architecture"], rows["j03"]["num_servers"]) == ("ps_worker", None)
    # j05: 2 workers x 1 GPU = 2 <= 8 -> one server; j04: 4 workers x 2 GPUs = 8 <= 8 -> one server
    assert (rows["j05"]["architecture"], rows["j05"]["num_servers"]) == ("allreduce_local", 1)
    assert (rows["j04"]["architecture"], rows["j04"]["num_gpus"], rows["j04"]["num_servers"]) == (
        "allreduce_local", 8, 1)
    # j13: 3 workers x 1 GPU on 3 <= 8 -> one server
    assert (rows["j13"]["architecture"], rows["j13"]["num_servers"]) == ("allreduce_local", 1)
    # no tags at all: every job with GPU workers and a catalog GPU lacks a workload tag
    assert rows["j01"]["reason"] == "no workload tag"
    assert rows["j01"]["duration_s"] == 2950 - 1050  # from the task's own times
    assert any("not given: pai_instance_table" in n for n in report.notes)
    assert report.attributed_jobs == 0
    # no tag: j01-j06, j08, j09, j13, j15-j17, j22-j24 = 15; the other 9 keep their earlier reasons
    # (5 malformed task rows, no task rows, no GPU, GPUs only on the evaluator, MISC)
    msg = report.no_jobs_message()
    assert msg is not None and msg.startswith("none of the 24 jobs of ")
    assert "no workload tag: 15; malformed task row: 5;" in msg and "--model-mix" in msg


def test_status_selection(pai_dir):
    """Job statuses of the fixture: j04 Running, j05 Failed, j12 Waiting, the other 21 Terminated.
    Default (--status ran): every status but Waiting; the excluded jobs stay in the population with a
    reason and are counted per status."""
    pop, report = read_population(pai_dir)
    rows = by_job(pop)
    assert rows["j12"]["reason"] == "excluded by status: Waiting" and rows["j12"]["status"] == "Waiting"
    assert rows["j04"]["attributed"] and rows["j05"]["attributed"]  # Running and Failed jobs ran
    assert "1 job(s) excluded by status (Waiting 1): --status ran (the default: jobs that ran; Waiting/Pending " \
        "jobs never held their GPUs); --status all evaluates every job" in report.notes
    # all: j12 falls to the reader's own reason
    pop, report = read_population(pai_dir, statuses="all")
    assert by_job(pop)["j12"]["reason"] == "no task rows" and report.attributed_jobs == 10
    assert not any("excluded by status" in n for n in report.notes)
    # the trace's own spellings, any case: Terminated and Failed -> j04 (Running) excluded too: 10 - 1 = 9
    pop, report = read_population(pai_dir, statuses="terminated,FAILED")
    summary = dict(zip(report.summary()["reason"], report.summary()["jobs"], strict=True))
    assert report.attributed_jobs == 9
    assert summary["excluded by status: Running"] == 1 and summary["excluded by status: Waiting"] == 1
    # classes: finished only -> j04 (Running) and j05 (Failed) out: 10 - 2 = 8 attributed
    pop, report = read_population(pai_dir, statuses=["finished"])
    assert report.attributed_jobs == 8 and by_job(pop)["j05"]["reason"] == "excluded by status: Failed"
    assert sum(report.summary()["jobs"]) == 24  # still every job accounted for
    with pytest.raises(ValueError, match=r"--status: 'termnated' is neither a status class \(finished, failed, "
                       r"running, waiting, other, unknown\) nor a status of the trace \(found: Failed, Running, "
                       r"Terminated, Waiting\)"):
        read_population(pai_dir, statuses="termnated")
    with pytest.raises(ValueError, match="'all' stands alone"):
        read_population(pai_dir, statuses="all,failed")


def test_unknown_placement_takes_the_fewest_servers_that_fit(tmp_path):
    """Without instance rows, a job of several workers goes on as few servers as its GPUs need
    (issue 13: it was forced onto 2+ servers). j04: 4 workers x ceil(200 / 100) = 8 GPUs; j05: 2 x 1 = 2."""
    from ddlscope.specs.architecture import Architecture

    d = write_pai(tmp_path / "pai", {"pai_job_table": JOB, "pai_task_table": TASK})
    rows = by_job(read_population(d)[0])
    # 8-GPU servers (default): 8 <= 8 and 2 <= 8 -> one server each, ring all-reduce inside it
    assert [(rows[j]["architecture"], rows[j]["num_servers"]) for j in ("j04", "j05")] == [
        ("allreduce_local", 1), ("allreduce_local", 1)]
    # 4-GPU servers: 8 > 4 -> allreduce_cluster on ceil(8 / 4) = 2 servers (the model resolves the null count);
    # 2 <= 4 -> still one server
    rows = by_job(read_population(d, server_gpus=4)[0])
    assert [(rows[j]["architecture"], rows[j]["num_servers"]) for j in ("j04", "j05")] == [
        ("allreduce_cluster", None), ("allreduce_local", 1)]
    r = rows["j04"]
    arch = Architecture(kind=r["architecture"], num_workers=r["num_workers"], gpus_per_worker=r["gpus_per_worker"])
    assert arch.servers_on(4) == 2


def test_find_tables_errors(tmp_path):
    (tmp_path / "pai_job_table.csv").write_text(JOB)
    with pytest.raises(ValueError, match="needs pai_task_table"):
        find_tables([tmp_path])
    other = tmp_path / "jobs.csv"
    other.write_text("x\n")
    with pytest.raises(ValueError, match="not a PAI 2020 table file"):
        find_tables([tmp_path / "pai_job_table.csv", other])
    with pytest.raises(FileNotFoundError):
        find_tables([tmp_path / "nope"])


def placements(pop: pl.DataFrame) -> list[dict]:
    cols = ["architecture", "num_workers", "gpus_per_worker", "num_ps", "num_servers"]
    rows = pop.filter("attributed").select(cols).unique()
    return rows.with_columns(pl.col("architecture").cast(pl.String)).to_dicts()


def test_every_attributed_placement_is_a_valid_architecture(population):
    pop, _ = population
    for row in placements(pop):
        arch = Architecture(kind=row.pop("architecture"), **row)
        assert arch.num_gpus >= 1


# Repeated rows: exact duplicates and superseded records, each counted (hand-made tables; lines 1-based)
REPEATS = {
    "pai_job_table": (
        "a1,ia1,u,Terminated,1,2\n"
        "a2,ia2,u,Terminated,1,2\n"
        "a1,ia1,u,Terminated,1,2\n"          # 3: exact duplicate of line 1
        "a2,ia2,u,Failed,1,2\n"              # 4: same job_name, other content: malformed 'duplicate key'
    ),
    "pai_task_table": (
        "a1,worker,2.0,Terminated,10,20,600,10,100.0,V100\n"
        "a1,worker,2.0,Terminated,10,20,600,10,100.0,V100\n"   # 2: exact duplicate (a1 stays well-formed)
        "a2,worker,1.0,Terminated,10,20,600,10,100.0,V100\n"
    ),
    "pai_instance_table": (
        "a1,worker,n1,w1,ia1,Failed,100,150,m1\n"       # 1: superseded by line 3 (start 100 < 200)
        "a1,worker,n2,w2,ia1,Terminated,100,400,m1\n"
        "a1,worker,n1,w1,ia1,Terminated,200,500,m1\n"   # 3: the kept run of w1
        "a1,worker,n1,w1,ia1,Failed,120,160,m2\n"       # 4: superseded by line 3 (start 120 < 200)
        "a1,worker,n2,w2,ia1,Terminated,100,400,m1\n"   # 5: exact duplicate of line 2
        "a2,worker,n3,w3,ia2,Terminated,100,300,m1\n"
    ),
    "pai_sensor_table": (
        "a1,worker,w1,ia1,m1,/dev/nvidia0,100,30,1,1,1,2.0,0,0,0,0\n"   # 1: superseded by line 2
        "a1,worker,w1,ia1,m1,/dev/nvidia0,100,50,1,1,1,4.0,0,0,0,0\n"
        "a1,worker,w2,ia1,m1,/dev/nvidia1,100,70,1,1,1,1.0,0,0,0,0\n"
        "a1,worker,w2,ia1,m1,/dev/nvidia1,100,70,1,1,1,1.0,0,0,0,0\n"   # 4: exact duplicate of line 3
    ),
    "pai_group_tag_table": "ia1,u,V100,g,bert\nia1,u,V100,g,bert\nia2,u,V100,g,resnet\n",  # 2: exact duplicate
    "pai_machine_spec": "m1,V100,96,512,8\nm1,V100,96,512,8\nm2,V100,96,512,8\n",  # 2: exact duplicate
}


def test_repeated_rows_counted_by_reason(tmp_path):
    pop, report = read_population(write_pai(tmp_path / "pai", REPEATS))
    t = {r["table"]: r for r in report.tables.iter_rows(named=True)}
    got = {k: (r["data_rows"], r["malformed_rows"], r["duplicate_rows"], r["superseded_rows"], r["used_rows"])
           for k, r in t.items()}
    # data_rows = malformed + duplicate + superseded + used
    assert got == {
        "job": (4, 1, 1, 0, 2),
        "task": (3, 0, 1, 0, 2),
        "instance": (6, 0, 1, 2, 3),
        "sensor": (4, 0, 1, 1, 2),
        "group_tag": (3, 0, 1, 0, 2),
        "machine_spec": (3, 0, 1, 0, 2),
    }
    assert report.malformed.select("table", "line", "problem").rows() == [("job", 4, "duplicate key")]
    rows = by_job(pop)
    # a1: workers w1 (kept run 200-500 on m1) and w2 (100-400 on m1): the superseded m2 run does not count, so one
    # machine -> allreduce_local, 2 GPUs; duration max(end) - min(start) = 500 - 100 = 400 s; GPU time 400 x 2
    a1 = rows["a1"]
    assert (a1["architecture"], a1["num_gpus"], a1["num_servers"], a1["duration_s"], a1["gpu_time_s"]) == (
        "allreduce_local", 2, 1, 400.0, 800.0)
    # sensors: w1's later row (util 50, 4.0 GB) replaces its first (30, 2.0); w2: 70, 1.0 GB
    # -> mean util (50 + 70) / 2 = 60 %, peak memory max(4.0, 1.0) x 2^30 bytes
    assert (a1["measured_gpu_util_percent"], a1["measured_peak_gpu_memory_bytes"]) == (60.0, 4.0 * GIB)
    # the exact duplicate task row leaves a1 attributed; a2: 1w1g, 300 - 100 = 200 s
    assert (a1["attributed"], rows["a2"]["attributed"], rows["a2"]["duration_s"]) == (True, True, 200.0)
    notes = " | ".join(report.notes)
    assert "pai_instance_table: 2 row(s) superseded by a later record of the same instance" in notes
    assert "pai_sensor_table: 1 row(s) superseded by a later record of the same worker_name" in notes
    for stem in ("pai_job_table", "pai_task_table", "pai_instance_table", "pai_sensor_table", "pai_group_tag_table",
                 "pai_machine_spec"):
        assert f"{stem}: 1 exact duplicate row(s) of an earlier line (not used)" in notes
    assert [r["duplicate_rows"] for r in report.to_dict()["tables"]] == [1, 1, 1, 1, 1, 1]


def test_pai_tables_in_a_sub_folder_are_found(tmp_path):
    """A folder whose trace lies deeper (here two levels down) is searched, as `ddlscope trace` searches folders;
    the note names the files read."""
    write_pai(tmp_path / "top" / "2020" / "pai")
    (tmp_path / "top" / "README.md").write_text("about the trace\n")
    pop, report = read_population(tmp_path / "top")
    assert report.fmt == "pai-v2020" and pop.height == 24 and report.attributed_jobs == 10
    note = report.notes[0]
    assert note.startswith(f"{tmp_path / 'top'}: searched its sub-folders: read 6 pai-v2020 file(s) "
                           "(2020/pai/pai_group_tag_table.csv, 2020/pai/pai_instance_table.csv,")
    assert note.endswith("1 other file(s) are not pai-v2020 job traces and were not read: README.md")
