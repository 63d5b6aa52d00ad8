"""Generic job tables through a column mapping: rules, malformed rows, errors (small fixtures)."""

from __future__ import annotations

import polars as pl
import pytest

from ddlscope.ingest import (
    FEATURE_COLUMNS,
    POPULATION_SCHEMA,
    IngestReport,
    NoAttributableJobsError,
    TableMapping,
    parse_map_pairs,
    read_population,
)
from ddlscope.ingest.models import assign_model_mix, builtin_model_map, parse_model_mix
from ddlscope.model.jobs import ArchitectureEnum


def by_line(pop: pl.DataFrame) -> dict[int, dict]:
    return {r["line"]: r for r in pop.iter_rows(named=True)}


GAVEL_CMD = "cd %s/x && python3 train.py"


def gavel_line(job_type: str, steps: str, gpus: str) -> str:
    return "\t".join([job_type, GAVEL_CMD, "-n", "1", steps, "0.000000", gpus])


def test_gavel_rows_with_zero_gpus_and_malformed_lines(tmp_path):
    lines = [
        gavel_line("ResNet-50 (batch size 64)", "1000", "4"),  # 1: ok, allreduce_local
        gavel_line("Transformer (batch size 16)", "10", "0"),  # 2: 0 GPUs (Gavel skips it; we count it)
        "\t".join(["LM (batch size 5)", GAVEL_CMD, "-n", "1", "10", "0.0"]),  # 3: 6 fields
        gavel_line("ResNet-18 (batch size 32)", "ten", "1"),  # 4: unparsable total_steps
        gavel_line("ResNet-18 (batch size 32)", "10", "-2"),  # 5: negative GPU count
        "",  # 6: blank
        gavel_line("A3C", "10", "16"),  # 7: no batch size, no zoo model, allreduce_cluster
        gavel_line("ResNet-18 (batch size 32)", "10", "1.5"),  # 8: fractional -> 2 GPUs, shared
    ]
    path = tmp_path / "vc.trace"
    path.write_text("\n".join(lines) + "\n")
    pop, report = read_population(path)
    assert report.fmt == "gavel" and pop.height == 4
    rows = by_line(pop)
    assert (rows[1]["model"], rows[1]["batch_size"], rows[1]["architecture"], rows[1]["num_gpus"]) == (
        "resnet50", 64, "allreduce_local", 4)
    assert rows[2]["reason"] == "no GPU requested" and rows[2]["num_gpus"] is None
    assert (rows[7]["trace_model"], rows[7]["batch_size"], rows[7]["architecture"], rows[7]["num_servers"]) == (
        "A3C", None, "allreduce_cluster", None)
    assert rows[7]["reason"] == "label not mapped to a zoo model"
    assert (rows[8]["num_gpus"], rows[8]["gpu_request"], rows[8]["shared_gpu"], rows[8]["architecture"]) == (
        2, 1.5, True, "allreduce_local")
    t = report.tables.row(0, named=True)
    assert (t["data_rows"], t["blank_lines"], t["malformed_rows"], t["used_rows"]) == (7, 1, 3, 4)
    problems = {r["line"]: (r["problem"], r["detail"]) for r in report.malformed.iter_rows(named=True)}
    assert problems == {
        3: ("wrong field count", "expected 7 fields, got 6"),
        4: ("unparsable number", "column total_steps (num_steps): expected a number, got 'ten'"),
        5: ("negative value", "num_gpus -2.0; expected >= 0"),
    }
    assert report.malformed.filter(pl.col("line") == 5)["text"][0] == lines[4]
    assert dict(zip(report.summary()["reason"], report.summary()["jobs"], strict=True)) == {
        "attributed": 2, "label not mapped to a zoo model": 1, "no GPU requested": 1}


def test_user_csv_with_map_pairs(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text(
        "id,net,gpus,secs,state\n"
        "a,ResNet-50,8,100,ok\n"
        "b,\"BERT, large\",16,50,ok\n"   # quoted field with the separator: 'BERT, large' -> bertlarge
        "c,,1,10,ok\n"
        "d,vgg16,2,x,ok\n"              # unparsable duration
    )
    with pytest.raises(ValueError, match="cannot tell the trace format"):
        read_population(path)
    pop, report = read_population(
        path, mapping=parse_map_pairs(["job_id=id", "model=net", "num_gpus=gpus", "duration_s=secs", "status=state"]),
        server_gpus=4,
    )
    assert report.fmt == "csv" and pop["job_id"].to_list() == ["a", "b", "c"]
    rows = {r["job_id"]: r for r in pop.iter_rows(named=True)}
    # 8 GPUs > 4 per server -> allreduce_cluster, one worker per GPU; gpu_time = 100 s x 8 = 800
    assert (rows["a"]["architecture"], rows["a"]["num_workers"], rows["a"]["gpus_per_worker"]) == (
        "allreduce_cluster", 8, 1)
    assert rows["a"]["gpu_time_s"] == 800.0 and rows["a"]["model"] == "resnet50"
    assert rows["b"]["model"] == "bert_large" and rows["b"]["gpu_time_s"] == 800.0
    assert rows["c"]["reason"] == "no model label"
    assert report.malformed.row(0, named=True)["line"] == 5
    assert report.malformed.row(0, named=True)["text"] == "d,vgg16,2,x,ok"


def test_repeated_rows_with_and_without_a_job_id(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text(
        "id,net,gpus\n"
        "j1,resnet50,8\n"     # line 2: kept
        "j1,resnet50,8\n"     # line 3: exact duplicate of line 2 -> duplicate_rows
        "j1,resnet50,4\n"     # line 4: j1 again with other values -> malformed, first kept
        "j2,bert_base,2\n"    # line 5: kept
    )
    b.write_text("id,net,gpus\nj2,resnet50,1\nj3,resnet50,1\n")  # j2 given in a.csv -> malformed
    pop, report = read_population([a, b], mapping=parse_map_pairs(["job_id=id", "model=net", "num_gpus=gpus"]))
    assert pop["job_id"].to_list() == ["j1", "j2", "j3"] and pop["num_gpus"].to_list() == [8, 2, 1]
    t = report.tables.select("file", "data_rows", "malformed_rows", "duplicate_rows", "used_rows").rows()
    # data_rows = used + malformed + duplicate: a.csv 4 = 2 + 1 + 1, b.csv 2 = 1 + 1 + 0
    assert t == [(str(a), 4, 1, 1, 2), (str(b), 2, 1, 0, 1)]
    bad = report.malformed.select("file", "line", "problem").rows()
    assert bad == [(str(a), 4, "duplicate job_id"), (str(b), 2, "duplicate job_id")]
    assert any("1 exact duplicate row(s)" in n for n in report.notes)
    # the same job in a later file with the same values (written differently: 8.0, spaces, another
    # column order) is an exact duplicate, not a conflict; only other values are
    d = tmp_path / "d.csv"
    d.write_text("gpus,id,net\n8.0,j1, resnet50\n2,j2,bert_base\n1,j2,bert_base\n")  # j1, j2 as in a.csv; j2 again
    pop, report = read_population([a, b, d], mapping=parse_map_pairs(["job_id=id", "model=net", "num_gpus=gpus"]))
    assert pop["job_id"].to_list() == ["j1", "j2", "j3"]
    t = report.tables.select("file", "data_rows", "malformed_rows", "duplicate_rows", "used_rows").rows()
    # d.csv 3 = 0 used + 1 malformed (j2 with 1 GPU) + 2 duplicates (j1, j2 as in a.csv)
    assert t == [(str(a), 4, 1, 1, 2), (str(b), 2, 1, 0, 1), (str(d), 3, 1, 2, 0)]
    assert report.malformed.select("file", "line", "problem").rows()[-1] == (str(d), 4, "duplicate job_id")
    assert any(n.startswith("3 exact duplicate row(s)") for n in report.notes)
    # without an id, identical lines may be different jobs: all three are jobs
    c = tmp_path / "c.csv"
    c.write_text("net,gpus\nresnet50,8\nresnet50,8\nresnet50,8\n")
    pop, report = read_population(c, mapping=parse_map_pairs(["model=net", "num_gpus=gpus"]))
    assert pop.height == 3 and report.tables["duplicate_rows"].to_list() == [0]


def test_mapping_file_extract_constants_models_and_global_batch(tmp_path):
    path = tmp_path / "jobs.tsv"
    path.write_text("job\tkind\tbatch\tn\n1\tmodel=ctr-v2\t512\t2\n2\tmodel=mystery\t64\t1\n3\tmodel=ctr-v2\t100\t3\n")
    mfile = tmp_path / "map.toml"
    mfile.write_text(
        '[mapping]\nname = "mine"\nseparator = "tab"\nbatch_size_scope = "global"\n'
        'fields = { job_id = "job", model = "kind", batch_size = "batch", num_gpus = "n" }\n'
        'extract = { model = "model=([a-z]+)" }\n'
        'constants = { gpu = "T4", status = "Terminated" }\n'
        '[mapping.models]\nctr = "dlrm"\n'
    )
    pop, report = read_population(path, mapping=mfile)
    rows = {r["job_id"]: r for r in pop.iter_rows(named=True)}
    assert report.fmt == "mine"
    assert (rows["1"]["trace_model"], rows["1"]["model"], rows["1"]["gpu"], rows["1"]["status"]) == (
        "ctr", "dlrm", "T4", "Terminated")
    assert rows["1"]["batch_size"] == 256  # global 512 over 2 GPUs
    assert rows["3"]["batch_size"] == 33   # round(100 / 3)
    assert rows["2"]["reason"] == "label not mapped to a zoo model"
    # the mapping's models do not leak into the built-in map
    assert builtin_model_map().lookup("ctr") == "dlrm" and builtin_model_map().lookup("mystery") is None


def test_parquet_features_and_given_architecture(tmp_path):
    path = tmp_path / "jobs.parquet"
    pl.DataFrame({
        "arch": ["ps_worker", "1w1g", "allreduce_local", "1w1g", "ring"],
        "workers": [4, 1, 2, 2, 1],
        "gpw": [1, 1, 2, 1, 1],
        "ps": [2, None, None, None, None],
        "flops": [1e12, 2e12, None, 1e12, 1e12],
        "mem": [1e9, 2e9, 1e9, 1e9, 1e9],
        "prec": ["fp16", "fp32", "bf16", "fp32", "fp32"],
    }).write_parquet(path)
    mapping = TableMapping(fields={"architecture": "arch", "num_workers": "workers", "gpus_per_worker": "gpw",
                                   "num_ps": "ps", "compute_bound_flops": "flops", "memory_bound_bytes": "mem",
                                   "precision": "prec"})
    pop, report = read_population(path, mapping=mapping)
    rows = by_line(pop)
    assert (rows[1]["architecture"], rows[1]["num_workers"], rows[1]["num_ps"], rows[1]["num_gpus"]) == (
        "ps_worker", 4, 2, 4)
    assert rows[1]["attributed"] and rows[1]["model_source"] == "features" and rows[1]["compute_bound_flops"] == 1e12
    assert rows[1]["precision"] == "fp16" and pop.schema["precision"] == pl.Enum(["fp32", "tf32", "fp16", "bf16"])
    assert rows[3]["reason"] == "no model label"  # features incomplete (no FLOPs)
    problems = {r["line"]: r["problem"] for r in report.malformed.iter_rows(named=True)}
    assert problems == {4: "architecture does not fit counts", 5: "unknown architecture"}


def test_feature_columns_are_the_model_workload_columns():
    # the Jobs table's workload columns (ddlscope.model.jobs.WORKLOAD_COLUMNS) less the name and the batch
    # size (population columns of their own), with the Jobs table's dtypes
    assert list(FEATURE_COLUMNS) == [
        "precision", "compute_bound_flops", "memory_bound_bytes", "memory_bound_flops", "input_bytes",
        "stored_input_bytes", "dense_param_bytes", "num_gradient_tensors", "sparse_bytes_per_step",
        "embedding_table_bytes", "peak_memory_bytes",
    ]
    assert FEATURE_COLUMNS["num_gradient_tensors"] == pl.Int64 and FEATURE_COLUMNS["input_bytes"] == pl.Float64
    assert POPULATION_SCHEMA["architecture"][0] == ArchitectureEnum  # the model's enum, not a copy


def test_status_values_and_times(tmp_path):
    path = tmp_path / "pods.csv"
    path.write_text("name,num_gpu,gpu_milli,scheduled_time,deletion_time,pod_phase,gpu_spec,qos,cpu_milli\n"
                    "p1,1,500,10,110,Running,V100,LS,1\n"
                    "p2,1,1000,10,5,Running,,LS,1\n"     # end before start
                    "p3,1,1000,10,20,Exploded,,LS,1\n"   # unknown status
                    "p4,1,1500,10,20,Running,,LS,1\n")   # share 1.5 > 1
    pop, report = read_population(path, model_mix="resnet18=1")
    assert report.fmt == "openb-v2023" and pop["job_id"].to_list() == ["p1"]
    r = pop.row(0, named=True)
    assert (r["gpu_request"], r["shared_gpu"], r["duration_s"], r["gpu_time_s"], r["gpu"]) == (
        0.5, True, 100.0, 50.0, "V100-SXM2-16GB")
    assert report.malformed["problem"].to_list() == ["end before start", "unknown status", "value out of range"]


def test_zero_attributable_and_empty_tables(tmp_path):
    path = tmp_path / "philly.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n")
    pop, report = read_population(path)
    assert report.attributed_jobs == 0
    assert report.headline() == "1 job read (philly-pollux): 0 attributed (0.0 %), 1 not attributed; 0 malformed row(s)"
    with pytest.raises(NoAttributableJobsError,
                       match=r"^the one job of .* cannot be attributed to a workload \(no model label: 1\)"):
        report.require_attributed()
    empty = tmp_path / "empty.csv"
    empty.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n")
    pop, report = read_population(empty, fmt="philly-pollux")
    assert pop.height == 0 and isinstance(report, IngestReport)
    assert report.no_jobs_message() == f"no job could be read from {empty}: no data row (a header only, or blank lines)"


def test_mapping_errors(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="unknown field 'gpus'"):
        parse_map_pairs(["gpus=a"])
    with pytest.raises(ValueError, match=r"expected a population field \(job_id, model, .*, status\) or a feature "
                                         r"column \(precision, compute_bound_flops, .*, peak_memory_bytes;"):
        parse_map_pairs(["nosuch=a"])
    with pytest.raises(ValueError, match=r"jobs.csv: unknown column\(s\) \[.n.\]; the table.s columns are \[.a., .b"):
        read_population(path, mapping={"num_gpus": "n"})
    with pytest.raises(ValueError, match="no GPU count"):
        read_population(path, mapping={"model": "a"})
    with pytest.raises(ValueError, match="unknown trace format 'slurm'"):
        read_population(path, fmt="slurm")
    with pytest.raises(ValueError, match="fixed schema"):
        read_population(path, fmt="pai-v2020", mapping={"num_gpus": "a"})
    with pytest.raises(ValueError, match="unknown zoo model 'resnet151'"):
        read_population(path, mapping={"num_gpus": "a"}, model_mix="resnet151=1")
    with pytest.raises(ValueError, match="capture group"):
        TableMapping(fields={"model": "a"}, extract={"model": "abc"})
    with pytest.raises(FileNotFoundError):
        read_population(tmp_path / "missing.csv")


def test_golden_ratio_mix_rule():
    # u_k = frac(k x 0.6180339887...): k=1 -> 0.618, k=2 -> 0.236, k=3 -> 0.854, k=4 -> 0.472
    # with {a: 0.5, b: 0.5}: a where u < 0.5 -> rows 1..4 get b, a, b, a; the unmasked row gets null
    frame = pl.DataFrame({"m": [True, True, False, True, True]})
    out = frame.select(assign_model_mix(pl.col("m"), parse_model_mix("resnet50=1,bert_base=1")))
    assert out.to_series().to_list() == ["bert_base", "resnet50", None, "bert_base", "resnet50"]


M = ["job_id=id", "model=net", "num_gpus=gpus", "duration_s=secs"]


def test_non_finite_and_huge_numbers_are_malformed_rows(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text(
        "id,net,gpus,secs\n"
        "j1,resnet50,inf,100\n"                        # line 2: GPU count inf
        "j2,resnet50,99999999999999999999999,100\n"    # line 3: 1e23 GPUs
        "j3,resnet50,9223372036854775807,100\n"        # line 4: Int64 max (2^63 as a float)
        "j4,resnet50,1,inf\n"                          # line 5: duration inf
        "j5,resnet50,1,-inf\n"                         # line 6: duration -inf
        "j6,resnet50,2,100\n"                          # line 7: ok
    )
    pop, report = read_population(path, mapping=parse_map_pairs(M))
    # the one good job: 2 GPUs x 100 s = 200 GPU-seconds, a share of 1 (not nan)
    assert pop["job_id"].to_list() == ["j6"] and pop["gpu_time_s"].to_list() == [200.0]
    assert report.summary()["share_gpu_time"].to_list() == [1.0]
    got = {r["line"]: (r["problem"], r["detail"]) for r in report.malformed.iter_rows(named=True)}
    assert got == {
        2: ("not a finite number", "column gpus (num_gpus): expected a finite number, got 'inf'"),
        3: ("count too large",
            "column gpus (num_gpus): expected a count up to 9007199254740992, got '99999999999999999999999'"),
        4: ("count too large",
            "column gpus (num_gpus): expected a count up to 9007199254740992, got '9223372036854775807'"),
        5: ("not a finite number", "column secs (duration_s): expected a finite number, got 'inf'"),
        6: ("not a finite number", "column secs (duration_s): expected a finite number, got '-inf'"),
    }
    # an integer field (num_workers, parsed as a whole count) too large for Int64 is a row, not a null
    p2 = tmp_path / "w.csv"
    p2.write_text("id,w\nk1,9223372036854775807\nk2,3\n")
    pop, report = read_population(p2, mapping=parse_map_pairs(["job_id=id", "num_workers=w"]))
    assert pop["job_id"].to_list() == ["k2"] and pop["num_gpus"].to_list() == [3]
    assert report.malformed.select("line", "problem").rows() == [(2, "count too large")]


def test_non_finite_and_huge_numbers_in_parquet(tmp_path):
    path = tmp_path / "jobs.parquet"
    pl.DataFrame({
        "id": ["p1", "p2", "p3"],
        "gpus": [float("inf"), 1.0, 2.0],
        "w": [1, 9223372036854775807, 1],
        "secs": [10.0, 10.0, float("inf")],
    }).write_parquet(path)
    pop, report = read_population(
        path, mapping=parse_map_pairs(["job_id=id", "num_gpus=gpus", "num_workers=w", "duration_s=secs"]))
    assert pop.height == 0
    got = report.malformed.select("line", "problem").rows()
    assert got == [(1, "not a finite number"), (2, "count too large"), (3, "not a finite number")]


def test_first_data_row_with_an_extra_field(tmp_path):
    # Polars' parser rejects a first row wider than its schema; the row must be counted like any other
    for name, row in [("plain.csv", "j1,resnet50,1,100,extra"), ("quoted.csv", 'j1,"resnet50, v1",1,100,extra')]:
        path = tmp_path / name
        path.write_text(f"id,net,gpus,secs\n{row}\nj0,resnet50,2,100\nj2,resnet50,1,100,x,y\n")
        pop, report = read_population(path, mapping=parse_map_pairs(M))
        assert pop["job_id"].to_list() == ["j0"] and pop["num_gpus"].to_list() == [2]
        got = report.malformed.select("line", "problem", "detail", "text").rows()
        assert got == [(2, "wrong field count", "expected 4 fields, got 5", row),
                       (4, "wrong field count", "expected 4 fields, got 6", "j2,resnet50,1,100,x,y")]


def test_utf8_byte_order_mark_is_stripped(tmp_path):
    # Excel's "CSV UTF-8" starts the file with EF BB BF; the first column is 'id', not '\ufeffid'
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbfid,net,gpus,secs\r\nj1,resnet50,2,100\r\n")
    pop, report = read_population(path, mapping=parse_map_pairs(M))
    assert pop["job_id"].to_list() == ["j1"] and pop["gpu_time_s"].to_list() == [200.0]  # 2 GPUs x 100 s
    # headerless: the first line's text (reported when malformed) has no mark either
    trace = tmp_path / "vc.trace"
    trace.write_bytes(b"\xef\xbb\xbfLM\tcmd\n" + (gavel_line("ResNet-50 (batch size 64)", "10", "4") + "\n").encode())
    pop, report = read_population(trace)
    assert pop["line"].to_list() == [2]
    assert report.malformed.select("line", "problem", "text").rows() == [(1, "wrong field count", "LM\tcmd")]


def test_tsv_defaults_to_tab_and_separator_hint(tmp_path):
    tsv = tmp_path / "jobs.tsv"
    tsv.write_text("id\tnet\tgpus\tsecs\nj1\tresnet50\t4\t10\n")
    pop, _ = read_population(tsv, mapping=parse_map_pairs(M))
    assert pop["job_id"].to_list() == ["j1"] and pop["gpu_time_s"].to_list() == [40.0]  # 4 GPUs x 10 s
    # a .csv file stays comma-separated; a semicolon file read as one column gets a hint
    semi = tmp_path / "jobs.csv"
    semi.write_text("id;net;gpus;secs\nj1;resnet50;4;10\n")
    with pytest.raises(ValueError, match=r"one column holding ';': set separator \(e\.g\. separator = \";\""):
        read_population(semi, mapping=parse_map_pairs(M))
    tabbed = tmp_path / "tabbed.csv"
    tabbed.write_text("id\tnet\tgpus\tsecs\nj1\tresnet50\t4\t10\n")
    with pytest.raises(ValueError, match=r"one column holding tab: set separator \(e\.g\. separator = \"tab\""):
        read_population(tabbed, mapping=parse_map_pairs(M))
    # an explicit separator still wins over the name
    mapping = TableMapping(separator=";", fields=parse_map_pairs(M))
    pop, _ = read_population(semi, mapping=mapping)
    assert pop["gpu_time_s"].to_list() == [40.0]


def test_given_architecture_must_fit_its_servers(tmp_path):
    # characterize places a job on servers of 8 GPUs (Architecture.servers_on); ingest checks the same
    path = tmp_path / "jobs.csv"
    path.write_text(
        "id,net,gpus,secs,arch,srv\n"
        "j1,resnet50,16,100,allreduce_local,\n"    # line 2: 16 GPUs on one 8-GPU server
        "j2,resnet50,4,100,1w1g,\n"                # line 3: 1w1g with 4 GPUs
        "j3,resnet50,16,100,allreduce_cluster,\n"  # line 4: ok, 2 servers x 8
        "j4,resnet50,24,100,allreduce_cluster,2\n"  # line 5: 24 GPUs on 2 servers = 12 per server > 8
        "j5,resnet50,8,100,allreduce_local,\n"     # line 6: ok, one full server
    )
    pairs = [*M, "architecture=arch", "num_servers=srv"]
    pop, report = read_population(path, mapping=parse_map_pairs(pairs))
    assert pop["job_id"].to_list() == ["j3", "j5"]
    got = {r["line"]: r["detail"] for r in report.malformed.iter_rows(named=True)}
    assert got == {
        2: "allreduce_local with 16 GPUs; expected at most 8 (one server of 8 GPUs; --server-gpus sets it)",
        3: "1w1g with 4 GPUs; expected exactly 1 GPU",
        5: "allreduce_cluster with 24 GPUs on 2 servers puts 12 on a server; expected at most 8",
    }
    assert set(report.malformed["problem"]) == {"architecture does not fit counts"}
    # 16-GPU servers: the local job fits, 12 per server fits
    pop, report = read_population(path, mapping=parse_map_pairs(pairs), server_gpus=16)
    assert pop["job_id"].to_list() == ["j1", "j3", "j4", "j5"] and report.malformed["line"].to_list() == [3]


def test_examples_count_rows_without_a_detail():
    # a malformed row whose detail is null (e.g. formatted from a null count) is still an example
    from ddlscope.ingest.population import empty_population
    from ddlscope.ingest.table import MALFORMED_SCHEMA, TableRead

    bad = pl.DataFrame({"table": ["jobs", "jobs"], "file": ["x.csv", "x.csv"], "line": [2, 3],
                        "problem": ["architecture does not fit counts"] * 2, "detail": [None, "1w1g with 4 GPUs"],
                        "text": ["a", "b"]}, schema=MALFORMED_SCHEMA)
    read = TableRead(table="jobs", file="x.csv", frame=pl.DataFrame(), malformed=bad, data_rows=2, blank_lines=0)
    report = IngestReport.build("csv", ["x.csv"], [read], empty_population())
    assert report.malformed_summary(2)["examples"].to_list() == ["x.csv:2; x.csv:3 (1w1g with 4 GPUs)"]
    assert report.malformed_summary(1)["examples"].to_list() == ["x.csv:2"]


def test_unknown_gpu_names_are_named(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("id,net,gpus,g\nj1,resnet50,1,K80X\nj2,resnet50,1,K80X\nj3,resnet50,1,Z9\n")
    _, report = read_population(path, mapping=parse_map_pairs(["job_id=id", "model=net", "num_gpus=gpus", "gpu=g"]))
    assert report.unknown_gpus == [("K80X", 2), ("Z9", 1)]
    assert "GPU type(s) not in the catalog (jobs): K80X (2), Z9 (1)" in report.notes
    assert "GPU type(s) the catalog does not know (jobs): K80X (2), Z9 (1). Add the GPU" in report.no_jobs_message()


def test_header_only_file_message(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("id,net,gpus\n\n")
    _, report = read_population(path, mapping=parse_map_pairs(["job_id=id", "model=net", "num_gpus=gpus"]))
    assert report.no_jobs_message() == f"no job could be read from {path}: no data row (a header only, or blank lines)"
    path.write_text("id,net,gpus\nj1,resnet50\n")
    _, report = read_population(path, mapping=parse_map_pairs(["job_id=id", "model=net", "num_gpus=gpus"]))
    assert report.no_jobs_message() == (
        f"no job could be read from {path}: 1 data row(s), 1 malformed (see the malformed-row report)")


def test_architecture_values_ignore_case(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("id,net,gpus,secs,arch\nj1,resnet50,2,100,PS_Worker\nj2,resnet50,1,100,1W1G\n"
                    "j3,resnet50,4,100,Allreduce-Local\nj4,resnet50,1,100,Ring\n")
    pop, report = read_population(path, mapping=parse_map_pairs([*M, "architecture=arch"]))
    assert pop["architecture"].to_list() == ["ps_worker", "1w1g", "allreduce_local"]
    assert report.malformed.select("line", "problem").rows() == [(5, "unknown architecture")]
    assert report.malformed["detail"][0].startswith("architecture 'Ring'; expected one of 1w1g")


def test_empty_file_among_others_is_skipped_with_a_note(tmp_path):
    dd = tmp_path / "dd"
    dd.mkdir()
    (dd / "a.csv").write_text("id,net,gpus\nj1,resnet50,2\n")
    (dd / "b.csv").write_text("")
    pairs = parse_map_pairs(["job_id=id", "model=net", "num_gpus=gpus"])
    pop, report = read_population(dd, mapping=pairs)
    assert pop["job_id"].to_list() == ["j1"]
    assert f"1 empty file(s) (0 bytes, no header) skipped: {dd / 'b.csv'}" in report.notes
    assert report.tables["file"].to_list() == [str(dd / "a.csv")]
    # every file empty: nothing to read, the error names the file
    with pytest.raises(ValueError, match=r"b\.csv: empty file; expected a header line"):
        read_population(dd / "b.csv", mapping=pairs)


def test_a_table_cut_mid_line_counts_a_truncated_last_line(shared_data, tmp_path):
    # before: the cut line was a "wrong field count", like any ragged line
    data = (shared_data / "pollux" / "philly.csv").read_bytes()
    lines = data.split(b"\n")
    head = b"\n".join(lines[:6]) + b"\n" + lines[6][:14]   # header + 5 rows, then 14 bytes of row 6 (line 7)
    path = tmp_path / "philly.csv"
    path.write_bytes(head)
    pop, report = read_population(path)
    assert report.malformed.select("line", "problem", "detail").rows() == [
        (7, "truncated last line", "the file ends without a newline in this line: 1 of 5 fields")]
    t = report.tables.row(0, named=True)
    assert (t["data_rows"], t["malformed_rows"], t["used_rows"]) == (6, 1, 5)
    assert pop.height == 5


def test_invalid_utf8_is_a_malformed_row_naming_the_byte_offset(tmp_path):
    # before: Polars' "invalid utf8" error, naming neither file nor line
    path = tmp_path / "jobs.csv"
    text = b"id,net,gpus,secs\nj1,resnet50,2,100\nj2,res\xffnet,1,100\nj3,resnet50,4,10\n"
    path.write_bytes(text)
    pop, report = read_population(path, mapping=parse_map_pairs(M))
    offset = text.index(b"\xff")   # 17 + 18 + 6 = 41: the header line, line 2, then "j2,res"
    assert offset == 17 + 18 + 6
    assert report.malformed.select("line", "problem", "detail").rows() == [
        (3, "invalid UTF-8", f"byte {offset + 1} of the file (byte 7 of the line): 0xff is not UTF-8")]
    assert pop["job_id"].to_list() == ["j1", "j3"]
    # the header: an error naming file and line 1
    (tmp_path / "head.csv").write_bytes(b"i\xffd,net,gpus,secs\nj1,resnet50,2,100\n")
    with pytest.raises(ValueError, match=r"head\.csv:1: the header is not UTF-8 text: byte 2 of the file "):
        read_population(tmp_path / "head.csv", mapping=parse_map_pairs(M))


@pytest.mark.parametrize("name", ["ingest philly", "ingest gavel", "ingest cluster summary"])
def test_fuzz_generic_table_reader(name, shared_data, tmp_path_factory):
    """Seeded mutations of the real Philly (Pollux), Gavel and cluster-summary tables: a clean
    error naming the file, or data rows = jobs + malformed + duplicate rows, each malformed row with
    a problem; never a traceback or a silent drop."""
    from ddlscope.testing.fuzz import check_target

    check_target(name, tmp_path_factory.mktemp("fuzz"))
