"""`ddlscope characterize` end to end: built-in population, real traces, nothing attributable."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ddlscope.cli.main import app

runner = CliRunner()


def test_builtin_population_report(tmp_path):
    out = tmp_path / "rep"
    res = runner.invoke(app, ["characterize", "--out", str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    # 336 grid jobs; the 2 servers x 16 placements of gcn_reddit need 121 GB per replica > 16 GB
    assert payload["population_jobs"] == 336 and payload["evaluated_jobs"] == 304
    h = payload["headline"]
    assert h["jobs"] == 304 and h["ps_worker_jobs"] == 2 * 9 * 6
    assert 0 < h["mean_comm_share"] < 1 and 0 <= h["ps_worker_sped_up_by_allreduce_port"] <= 1
    assert h["mean_speedup_ethernet_25_to_100"] > 1
    rows = {r["reason"]: r["jobs"] for r in payload["rows"]}
    assert rows["attributed"] == 304 and sum(rows.values()) == 336
    for name in ("breakdown", "comm_share_cdf", "speedups", "bottlenecks"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 10_000
        assert (out / "figures" / f"{name}.svg").exists()
    for name in ("component_shares", "scenario_speedups", "jobs", "accounting"):
        assert (out / "tables" / f"{name}.csv").exists() and (out / "tables" / f"{name}.parquet").exists()
    per_job = (out / "tables" / "jobs.csv").read_text().splitlines()
    assert len(per_job) == 1 + 304 and "speedup_ethernet-100g" in per_job[0] and "applied_gpu-h100" in per_job[0]
    html = (out / "index.html").read_text()
    assert "reconstruction" in html and "data:image/png;base64" in html
    assert json.loads((out / "summary.json").read_text())["evaluated_jobs"] == 304


def test_gavel_traces_end_to_end(shared_data, tmp_path):
    """The 15 Gavel Philly-VC files (15,264 jobs; SOURCES.md): 8,337 map to zoo models (ResNet-18 3,268,
    Transformer 3,013, ResNet-50 2,056); Recommendation, LM, CycleGAN and A3C have no zoo model."""
    res = runner.invoke(app, ["characterize", str(shared_data / "gavel_traces" / "msr" / "seed=0"), "--out",
                              str(tmp_path / "g"), "--no-figures", "--format", "json",
                              "--scenario", "ethernet-100g"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    rows = {r["reason"]: r["jobs"] for r in payload["rows"]}
    assert payload["population_jobs"] == 15_264
    assert rows == {"attributed": 8_337, "label not mapped to a zoo model": 6_927}
    assert payload["evaluated_jobs"] == 8_337
    # Gavel gives steps, no durations: the reader counts all 15,264 jobs (a structured field), and every evaluated
    # job's GPU-time weight is estimated from its steps; the notes say both, none says they weigh nothing
    assert payload["jobs_without_duration"] == 15_264
    assert payload["gpu_time_sources"] == {"steps x predicted step time": 8_337}
    # said once: the reader's count and the weight together, in one note
    about = [n for n in payload["notes"] if "duration" in n]
    assert about == ["15,264 job(s) have no duration in the trace (8,337 of them attributed): 8,337 evaluated job(s) "
                     "weigh their steps x the predicted baseline step time x GPUs in GPU-time-weighted aggregates."]
    assert not any("no weight" in n for n in payload["notes"])


def test_trace_with_nothing_attributable_is_a_clear_message(shared_data, tmp_path):
    res = runner.invoke(app, ["characterize", str(shared_data / "pollux" / "philly.csv"), "--out", str(tmp_path / "p")])
    assert res.exit_code == 2
    assert "no job the model can evaluate" in res.output and "--model-mix" in res.output
    assert "no model label" in res.output  # the accounting is printed
    assert not (tmp_path / "p" / "index.html").exists()


def test_trace_without_any_gpu_time_still_draws_the_report(tmp_path):
    """No duration, no steps: every GPU-time-weighted mean is undefined (null), the job-weighted ones
    are not; the report is written and says so instead of failing on the missing means."""
    path = tmp_path / "jobs.csv"
    path.write_text("id,num_gpus,model\n1,8,resnet50\n2,4,resnet50\n3,2,bert_base\n")
    out = tmp_path / "rep"
    res = runner.invoke(app, ["characterize", str(path), "--map", "job_id=id", "--map", "num_gpus=num_gpus",
                              "--map", "model=model", "--out", str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    assert payload["evaluated_jobs"] == 3 and payload["headline"]["mean_comm_share_gpu_time"] is None
    assert 0 < payload["headline"]["mean_comm_share"] < 1
    assert (out / "figures" / "breakdown.png").stat().st_size > 10_000


def test_headline_lines_say_when_no_job_counts():
    from ddlscope.cli.characterize import headline_lines

    h = {"mean_comm_share": 0.008, "mean_comm_share_gpu_time": 0.013, "ps_worker_jobs": 0,
         "ps_worker_sped_up_by_allreduce_port": None, "network_jobs": 0, "mean_speedup_ethernet_25_to_100": None,
         "mean_speedup_ethernet_25_to_100_all_jobs": 1.0}
    _, ps, net = headline_lines(h)
    assert ps == "  PS/Worker jobs sped up by porting to all-reduce over NVLink: no PS/Worker job in the population" \
        "   (study: 60 %)"
    assert net == "  mean speedup of 25 -> 100 Gb/s Ethernet: no job uses the network, 1.00x over all   (study: 1.7x)"
    h |= {"ps_worker_jobs": 1, "ps_worker_sped_up_by_allreduce_port": 1.0, "network_jobs": 1,
          "mean_speedup_ethernet_25_to_100": 1.5}
    _, ps, net = headline_lines(h)
    assert "over NVLink: 100.0 % of 1 job   (study" in ps
    assert "Ethernet: 1.50x over the 1 job using the network, 1.00x over all" in net
    h |= {"ps_worker_jobs": 2300, "network_jobs": 2}
    assert "100.0 % of 2,300 jobs" in headline_lines(h)[1] and "over the 2 jobs using" in headline_lines(h)[2]


def test_folder_with_the_trace_in_a_sub_folder(shared_data, tmp_path):
    """shared/data/alibaba holds the trace files in sub-folders (SOURCES.md): only v2023's pod list is a job trace
    (8,152 pods; 897 Pending, excluded by status by default; 1,088 CPU-only of which 36 are Pending). The node list,
    the v2020 .header schema files, the mini-batch tables and the v2025 serving trace are named as not read."""
    folder = shared_data / "alibaba"
    res = runner.invoke(app, ["characterize", str(folder), "--model-mix", "resnet50=1", "--scenario", "ethernet-100g",
                              "--out", str(tmp_path / "a"), "--no-figures", "--format", "json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    assert payload["population_jobs"] == 8152
    rows = {r["reason"]: r["jobs"] for r in payload["rows"]}
    assert rows["excluded by status: Pending"] == 897 and rows["no GPU requested"] == 1088 - 36
    note = next(n for n in payload["notes"] if "searched its sub-folders" in n)
    assert note.startswith(f"{folder}: searched its sub-folders: read 1 openb-v2023 file(s) "
                           "(v2023/openb_pod_list_default.csv); 16 other file(s) are not openb-v2023 job traces")
    # --status all evaluates the Pending pods too
    res = runner.invoke(app, ["characterize", str(folder), "--model-mix", "resnet50=1", "--scenario", "ethernet-100g",
                              "--out", str(tmp_path / "b"), "--no-figures", "--format", "json", "--status", "all"])
    rows = {r["reason"]: r["jobs"] for r in json.loads(res.output)["rows"]}
    assert "excluded by status: Pending" not in rows and rows["no GPU requested"] == 1088


def test_folder_without_any_known_trace_names_what_it_holds(shared_data, tmp_path):
    res = runner.invoke(app, ["characterize", str(shared_data / "alibaba" / "v2020_schema"), "--out",
                              str(tmp_path / "s")])
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert "v2020_schema: cannot tell the trace format: no job trace file of a known format in it or its " \
        "sub-folders (its 8 file(s): README.md, pai_group_tag_table.header" in text


def test_status_is_an_option_for_traces_only(tmp_path):
    res = runner.invoke(app, ["characterize", "--status", "all", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--status: options for reading a trace" in " ".join(res.output.split())


def test_chunk_jobs_needs_streaming_and_any_size_is_one_chunk_at_most(tmp_path):
    res = runner.invoke(app, ["characterize", "--chunk-jobs", "5", "--out", str(tmp_path / "a")])
    assert res.exit_code != 0 and "--chunk-jobs: read with --streaming only" in res.output
    # a chunk larger than the population (even beyond 64-bit) is the whole population: one chunk
    res = runner.invoke(app, ["characterize", "--streaming", "--chunk-jobs", str(10**20), "--format", "json",
                              "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["streaming"]["chunks"] == 1 and summary["headline"]["jobs"] == 304
