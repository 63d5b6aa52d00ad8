"""The real public populations of shared/data, end to end; counts from their SOURCES.md files."""

from __future__ import annotations

import polars as pl
import pytest

from ddlscope.ingest import POPULATION_SCHEMA, detect_format, read_population
from ddlscope.specs.architecture import Architecture

# gavel_traces/SOURCES.md: "Totals over the 15 files: 15,264 jobs; job families ..."
GAVEL_FAMILIES = {"ResNet-18": 3268, "Transformer": 3013, "Recommendation": 2908, "LM": 2766, "ResNet-50": 2056,
                  "CycleGAN": 716, "A3C": 537}
GAVEL_SCALE = {1: 10480, 2: 463, 4: 2044, 7: 2, 8: 1916, 12: 6, 16: 255, 20: 1, 24: 5, 32: 91, 64: 1}
GAVEL_FILES = {"0e4a51": 1181, "103959": 986, "11cb48": 2000, "23dbec": 9, "2869ce": 533, "51b7ef": 18,
               "6214e9": 2000, "6c71a0": 2000, "795a4c": 3, "7f04ca": 972, "925e2b": 4, "b436b2": 2000,
               "e13805": 607, "ed69ec": 951, "ee9e8c": 2000}
# pollux/SOURCES.md, philly.csv: 82,247 rows; num_gpus distribution
PHILLY_GPUS = {1: 76627, 2: 1818, 4: 1870, 8: 1643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3}


@pytest.fixture(scope="module")
def gavel(shared_data):
    return read_population(shared_data / "gavel_traces" / "msr" / "seed=0")


def test_gavel_all_files(gavel, shared_data):
    pop, report = gavel
    assert detect_format([shared_data / "gavel_traces" / "msr" / "seed=0"]) == "gavel"
    assert report.fmt == "gavel" and pop.height == 15264 == sum(GAVEL_FILES.values())
    assert list(pop.columns)[: len(POPULATION_SCHEMA)] == list(POPULATION_SCHEMA)
    assert dict(pop.group_by("trace_model").len().iter_rows()) == GAVEL_FAMILIES
    assert dict(pop.group_by("gpu_request").len().iter_rows()) == {float(k): v for k, v in GAVEL_SCALE.items()}
    per_file = {r["file"].rsplit("/", 1)[-1].removesuffix(".trace"): r["data_rows"]
                for r in report.tables.iter_rows(named=True)}
    assert per_file == GAVEL_FILES
    assert report.malformed_rows == 0 and report.tables["blank_lines"].sum() == 0
    # zoo models exist for ResNet-18, Transformer and ResNet-50: 3,268 + 3,013 + 2,056 = 8,337;
    # Recommendation + LM + CycleGAN + A3C = 2,908 + 2,766 + 716 + 537 = 6,927 have none
    summary = dict(zip(report.summary()["reason"], report.summary()["jobs"], strict=True))
    assert summary == {"attributed": 8337, "label not mapped to a zoo model": 6927}
    assert dict(pop.filter("attributed").group_by("model").len().iter_rows()) == {
        "resnet18": 3268, "transformer_nmt": 3013, "resnet50": 2056}
    # architecture from the GPU count with 8-GPU servers: 1 -> 1w1g; 2, 4, 7, 8 -> allreduce_local
    # (463 + 2,044 + 2 + 1,916 = 4,425); 12..64 -> allreduce_cluster (6 + 255 + 1 + 5 + 91 + 1 = 359)
    assert dict(pop.group_by(pl.col("architecture").cast(pl.String)).len().iter_rows()) == {
        "1w1g": 10480, "allreduce_local": 4425, "allreduce_cluster": 359}
    # per-GPU batch size parsed from the job type; A3C and CycleGAN give none
    assert pop.filter(pl.col("trace_model").is_in(["A3C", "CycleGAN"]))["batch_size"].null_count() == 716 + 537
    assert pop["batch_size"].null_count() == 716 + 537
    first = pop.row(0, named=True)  # 0e4a51.trace line 1: Transformer (batch size 128), 95121 steps, 1 GPU
    assert (first["job_id"], first["trace_model"], first["model"], first["batch_size"], first["num_steps"],
            first["num_gpus"], first["trace_arrival_time"]) == (
        "0e4a51:1", "Transformer", "transformer_nmt", 128, 95121, 1, "0.000000")
    # every placement is one the model's Architecture accepts, and fits 8-GPU servers
    counts = pop.select("architecture", "num_workers", "gpus_per_worker", "num_ps", "num_servers").unique()
    for row in counts.with_columns(pl.col("architecture").cast(pl.String)).to_dicts():
        arch = Architecture(kind=row.pop("architecture"), **row)
        assert arch.servers_on(8) >= 1
    # Gavel traces give steps, not durations
    assert pop["duration_s"].null_count() == 15264 and report.summary()["gpu_time_s"].null_count() == 2
    assert (report.jobs_without_duration, report.attributed_jobs_without_duration) == (15264, 8337)
    assert report.to_dict()["jobs_without_duration"] == 15264
    assert report.notes[-1] == ("15,264 job(s) without a known duration in the trace (8,337 of them attributed): "
                                "duration_s and gpu_time_s are null")


def test_philly_pollux_no_model_label(shared_data):
    path = shared_data / "pollux" / "philly.csv"
    assert detect_format([path]) == "philly-pollux"
    pop, report = read_population(path)
    assert pop.height == 82247
    t = report.tables.row(0, named=True)
    assert (t["data_rows"], t["blank_lines"], t["malformed_rows"]) == (82247, 1, 0)  # the file's extra empty line
    assert dict(pop.group_by("num_gpus").len().iter_rows()) == PHILLY_GPUS
    assert pop["duration_s"].max() == 4628226.0
    # gpu_time = duration x num_gpus for every row (pollux/SOURCES.md); kept from the trace
    assert (pop["gpu_time_s"] == pop["duration_s"] * pop["gpu_request"]).all()
    assert report.attributed_jobs == 0
    assert dict(zip(report.summary()["reason"], report.summary()["jobs"], strict=True)) == {"no model label": 82247}
    msg = report.no_jobs_message()
    assert msg and "none of the 82,247 jobs" in msg and "--model-mix" in msg
    assert set(pop["trace_cluster"].unique()) >= {"6214e9", "11cb48"}


def test_philly_pollux_with_a_model_mix(shared_data):
    mix = "resnet50=0.6,bert_base=0.3,gpt2=0.1"
    pop, report = read_population(shared_data / "pollux" / "philly.csv", model_mix=mix)
    assert report.attributed_jobs == 82247
    counts = dict(pop.group_by("model").len().iter_rows())
    # golden-ratio rule: each share within 10 jobs of weight x 82,247 (discrepancy O(log n))
    for model, weight in {"resnet50": 0.6, "bert_base": 0.3, "gpt2": 0.1}.items():
        assert abs(counts[model] - weight * 82247) <= 10, (model, counts[model])
    assert set(pop["model_source"].unique()) == {"mix"}
    # deterministic: the same rows get the same models on a second read
    again, _ = read_population(shared_data / "pollux" / "philly.csv", model_mix=mix)
    assert again["model"].equals(pop["model"])


def test_openb_v2023_pods(shared_data):
    path = shared_data / "alibaba" / "v2023" / "openb_pod_list_default.csv"
    assert detect_format([path]) == "openb-v2023"
    pop, report = read_population(path, model_mix={"resnet50": 1.0}, statuses="all")
    assert pop.height == 8152 and report.malformed_rows == 0
    # alibaba/SOURCES.md: num_gpu 0 for 1,088 pods; pod_phase Running 5,193 / Failed 1,870 / Pending 897 / Succeeded 192
    assert dict(zip(report.summary()["reason"], report.summary()["jobs"], strict=True)) == {
        "attributed": 8152 - 1088, "no GPU requested": 1088}
    # the default (--status ran): the 897 Pending pods never ran; they are excluded by status first, so the
    # CPU-only pods among them leave "no GPU requested"
    raw = pl.read_csv(path)
    pending_cpu = raw.filter((pl.col("pod_phase") == "Pending") & (pl.col("num_gpu") == 0)).height
    _, default = read_population(path, model_mix={"resnet50": 1.0})
    assert dict(zip(default.summary()["reason"], default.summary()["jobs"], strict=True)) == {
        "attributed": 8152 - 1088 - (897 - pending_cpu), "excluded by status: Pending": 897,
        "no GPU requested": 1088 - pending_cpu}
    assert pending_cpu == 36 and default.attributed_jobs == 6203
    assert dict(pop.group_by("status").len().iter_rows()) == {
        "Running": 5193, "Failed": 1870, "Pending": 897, "Succeeded": 192}
    assert pop.filter(pl.col("status") == "Pending")["duration_s"].null_count() == 897  # never scheduled
    # GPU sharing: one GPU with gpu_milli < 1000 -> shared, request = gpu_milli / 1000
    shared = raw.filter((pl.col("num_gpu") == 1) & (pl.col("gpu_milli") < 1000)).height
    assert pop["shared_gpu"].sum() == shared
    assert pop.filter(pl.col("job_id") == "openb-pod-0001")["gpu_request"][0] == pytest.approx(0.46)
    assert dict(pop.filter(pl.col("num_gpus") > 1).group_by("num_gpus").len().iter_rows()) == {2: 16, 4: 15, 8: 44}
    assert pop["gpu"].null_count() == 8152  # gpu_spec is empty in this file


def test_openb_v2023_folder_reads_only_the_pod_list(shared_data):
    """The v2023 folder as distributed also holds the node list (1,523 nodes): it is not a job table."""
    folder = shared_data / "alibaba" / "v2023"
    assert detect_format([folder]) == "openb-v2023"
    pop, report = read_population(folder)
    assert pop.height == 8152 and report.malformed_rows == 0


def test_the_same_trace_file_twice_is_an_error(shared_data):
    path = shared_data / "gavel_traces" / "msr" / "seed=0" / "23dbec.trace"
    with pytest.raises(ValueError, match="given twice"):
        read_population([path, path])


def test_every_model_map_target_is_a_zoo_model():
    """The built-in label map points only at real zoo entries (a typo would leave jobs unprofilable)."""
    from ddlscope.ingest.models import builtin_model_map
    from ddlscope.profile.zoo import ZOO

    targets = {t for t in builtin_model_map().as_dict().values() if t}
    assert targets and targets <= set(ZOO)
