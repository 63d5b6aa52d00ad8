"""``ddlscope rpc skew`` and ``ddlscope rpc offload`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.cli.rpc_skew import parse_bytes

runner = CliRunner()


def test_parse_bytes() -> None:
    assert parse_bytes("256KiB") == 262_144
    assert parse_bytes("1.5 MiB") == 1_572_864
    assert parse_bytes("1.5KiB") == 1_536
    assert parse_bytes("4MB") == 4_000_000
    assert parse_bytes("1000") == 1000
    for bad, message in (("4 furlongs", "expected a size like"), ("-5", "expected a size like"),
                         ("10 XB", "expected a size like"), ("0.5B", "not a whole number of bytes"),
                         ("0.1KiB", "not a whole number of bytes"),
                         ("99999999999999999999999", "expected at most 1 TiB")):
        with pytest.raises(ValueError, match=message):
            parse_bytes(bad)


def test_the_rpc_cli_modules_import_no_fitting_or_plotting_library() -> None:
    # the option values come from the analysis modules; SciPy (the fits) and matplotlib (the reports) must
    # still wait for a command that uses them, so that `ddlscope --help` does not pay for them
    code = ("import sys, ddlscope.cli.main; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'matplotlib') "
            "or m.startswith(('ddlscope.report.skew', 'ddlscope.report.rpc_dissect'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")})
    assert out.stdout.strip() == "[]"


def test_skew_on_a_criteo_column_json(shared_data: Path) -> None:
    res = runner.invoke(app, ["rpc", "skew", str(shared_data / "criteo" / "criteo_sample.txt"), "--column", "C1",
                              "--format", "json", "--top", "3"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    # C1 of the 200-row sample: 200 values, 27 distinct; the most frequent, 05db9164, 87 times
    assert out["events"] == 200
    assert out["distinct_keys"] == 27
    assert out["rows"][0]["label"] == "05db9164"
    assert out["top_1pct_share"] == pytest.approx(87 / 200)


def test_skew_table_and_report(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text(" ".join(["the"] * 50 + ["of"] * 20 + ["and"] * 10 + [f"w{'a' * i}" for i in range(30)]))
    res = runner.invoke(app, ["rpc", "skew", str(text), "--report", str(tmp_path / "rep"), "--window", "40"])
    assert res.exit_code == 0, res.output
    assert "Zipf rank-frequency" in res.output
    for name in ("index.html", "summary.json", "figures/rank_frequency.png", "figures/coverage.png",
                 "figures/churn.png", "tables/rank_frequency.csv"):
        assert (tmp_path / "rep" / name).exists(), name
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["events"] == 110
    assert summary["distinct_keys"] == 33


def test_offload_csv_and_report(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text(" ".join(["the", "of", "the", "and", "the", "x", "of", "y"] * 20))
    res = runner.invoke(app, ["rpc", "offload", str(text), "--workers", "2", "--batch-events", "8",
                              "--budget", "1KiB", "--budget", "2KiB", "--dim", "16", "-p", "lfu", "-p", "oracle",
                              "--format", "csv", "--report", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("policy,budget_bytes,capacity_keys,")
    # entry 16 x 4 + 16 = 80 B: 1 KiB holds floor(1024 / 80) = 12 keys, more than the 5 distinct words
    assert lines[1].startswith("lfu,1024,12,")
    assert len(lines) == 1 + 4
    assert (tmp_path / "rep" / "figures" / "offload.png").exists()


def test_user_errors_exit_2(shared_data: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["rpc", "skew", str(shared_data / "criteo" / "criteo_sample.txt"), "-c", "C99"])
    assert res.exit_code == 2
    assert "no column 'C99'" in " ".join(res.output.split())
    res = runner.invoke(app, ["rpc", "offload", str(tmp_path / "missing.txt")])
    assert res.exit_code == 2
    assert "no such file" in " ".join(res.output.split())
    text = tmp_path / "one.txt"
    text.write_text("a b c")
    res = runner.invoke(app, ["rpc", "offload", str(text)])  # one iteration only
    assert res.exit_code == 2
    assert "at least 2 iterations" in " ".join(res.output.split())


def test_offload_checks_budgets_before_reading_and_hints_at_a_working_replay(shared_data: Path, tmp_path: Path) -> None:
    # with --dim the budget is checked before the (missing) source is read; the entry is 64 x 4 + 8 + 8 = 272 B
    # (without --dim the dimension may come from the log: the budget is checked once it is known)
    res = runner.invoke(app, ["rpc", "offload", str(tmp_path / "missing.txt"), "-b", "143B", "--dim", "64"])
    assert res.exit_code == 2
    assert "--budget 143B: holds no switch entry; an entry takes 272 B" in " ".join(res.output.split())
    res = runner.invoke(app, ["rpc", "offload", str(tmp_path / "missing.txt"), "-b", "99999999999999999999999"])
    assert res.exit_code == 2 and "at most 1 TiB" in res.output and "Traceback" not in res.output
    criteo = str(shared_data / "criteo" / "criteo_sample.txt")
    # C3 of the 200-row sample has 191 non-empty cells: 8 x 1024 events per iteration give 1 iteration;
    # the hint keeps 8 workers with floor(191 / (8 x 10)) = 2 events each: ceil(191 / 16) = 12 iterations
    res = runner.invoke(app, ["rpc", "offload", criteo, "-c", "C3"])
    assert res.exit_code == 2
    assert ("191 events at 8 worker(s) x 1024 events per mini-batch make 1 iteration; lower --workers or "
            "--batch-events, e.g. --workers 8 --batch-events 2 gives 12 iterations") in " ".join(res.output.split())
    # the docs' example: little skew, so installs and write-backs cost more than the switch saves
    res = runner.invoke(app, ["rpc", "offload", criteo, "-c", "C3", "--workers", "2", "--batch-events", "10",
                              "-p", "lfu", "--format", "csv"])
    assert res.exit_code == 0, res.output
    saved = [float(line.split(",")[14]) for line in res.stdout.splitlines()[1:]]
    assert res.stdout.splitlines()[0].split(",")[14] == "server_bytes_saved_fraction"
    assert min(saved) < 0


def test_skew_reads_damaged_or_non_table_sources_with_one_line_errors(shared_data: Path, tmp_path: Path) -> None:
    data = (tmp_path / "t.parquet")
    import polars as pl

    pl.DataFrame({"iteration": [0, 1], "key": [1, 2], "updates": [3, 4]}).write_parquet(data)
    (tmp_path / "trunc.parquet").write_bytes(data.read_bytes()[:40])
    res = runner.invoke(app, ["rpc", "skew", str(tmp_path / "trunc.parquet")])
    assert res.exit_code == 2 and "trunc.parquet: cannot read as Parquet" in " ".join(res.output.split())
    text = shared_data / "text" / "tinyshakespeare.txt"
    res = runner.invoke(app, ["rpc", "skew", str(text), "--kind", "rpc_log"])
    # read as CSV (header "First Citizen:"); the lines with a comma have more fields than the header and are
    # rejected, the rest has no RPC columns
    out = " ".join(res.output.split())
    assert res.exit_code == 2
    assert f"{text}: an RPC log needs columns ['op', 'keys', 'iteration'] for key analysis (columns: First Citizen:;" \
        in out
    commas = sum("," in line for line in text.read_text().splitlines()[1:])
    assert f"skipped rejected line (extra_fields): {commas:,})" in out
    assert "Traceback" not in res.output


def test_churn_of_a_single_window_says_so(shared_data: Path) -> None:
    from ddlscope.report.skew import churn_figure
    from ddlscope.skew.frequency import analyze_skew
    from ddlscope.skew.streams import load_stream

    a = analyze_skew(load_stream(shared_data / "criteo" / "criteo_sample.txt", column="C1"))
    fig = churn_figure(a)   # 200 events, one window of 8192
    ax = fig.axes[0]
    assert not ax.lines and [t.get_text() for t in ax.texts] == [
        "one window (8192 events): no churn to show; a smaller --window gives more windows"]


def test_offload_of_an_rpc_log_reads_it_once_and_names_rpcs_by_worker(tmp_path: Path, monkeypatch) -> None:
    import polars as pl

    from ddlscope.rpc import readers
    from ddlscope.skew import streams

    # two workers whose rpc ids both restart at 0; stage times as in test_skew_latency's two-worker test:
    # worker 0 RPCs 210 ns (server stages 120 ns), worker 1 RPCs 410 ns (server stages 320 ns)
    client = {"client_issue_ns": 0, "client_send_start_ns": 10, "client_send_end_ns": 30, "client_recv_end_ns": 200,
              "client_done_ns": 210}
    server = {"server_recv_start_ns": 1000, "server_recv_end_ns": 1020, "server_proc_start_ns": 1050,
              "server_proc_end_ns": 1100, "server_send_end_ns": 1120}
    slow = {"client_recv_end_ns": 400, "client_done_ns": 410, "server_proc_end_ns": 1300, "server_send_end_ns": 1320}
    ids = {"server_id": 0, "connection_id": 0, "request_bytes": 64, "response_bytes": 16, "num_keys": 1,
           "op": "push_sparse"}
    rows = [{"rpc_id": 0, "worker_id": 0, "iteration": 0, "keys": [1, 2]},
            {"rpc_id": 0, "worker_id": 1, "iteration": 0, "keys": [1], **slow},
            {"rpc_id": 1, "worker_id": 0, "iteration": 1, "keys": [1, 3]},
            {"rpc_id": 1, "worker_id": 1, "iteration": 1, "keys": [2], **slow}]
    log = tmp_path / "log.parquet"
    pl.DataFrame([{**ids, **client, **server, **r} for r in rows]).write_parquet(log)
    reads: list[str] = []
    real = readers.read_raw_rpc_log

    def counting(paths, **kw):
        reads.append(str(paths))
        return real(paths, **kw)

    monkeypatch.setattr(readers, "read_raw_rpc_log", counting)
    monkeypatch.setattr(streams, "read_raw_rpc_log", counting)
    # 24 B = one entry of dim 2 (2 x 4 B + 8 B key + 8 B metadata)
    res = runner.invoke(app, ["rpc", "offload", str(log), "-b", "24B", "-p", "static", "--warmup-iterations", "1",
                              "--dim", "2", "-f", "csv"])
    assert res.exit_code == 0, res.output
    assert reads == [str(log)]  # keys and stage times from one read
    header, row = res.stdout.splitlines()[:2]
    got = dict(zip(header.split(","), row.split(","), strict=True))
    # static set {key 1}; (w0, rpc 1) keys (1, 3): h = 1/2 -> 210 - 60 = 150 ns; (w1, rpc 1) key 2: 410 ns
    assert float(got["latency_mean_us_before"]) == pytest.approx(0.310)
    assert float(got["latency_mean_us_after"]) == pytest.approx(0.280)
    res = runner.invoke(app, ["rpc", "offload", str(log), "-b", "24B", "-p", "static", "--warmup-iterations", "1",
                              "--dim", "2", "-f", "json"])
    summary = json.loads(res.stdout)
    # the output is a function of the input only: no machine-dependent speed figure (benchmarks/ prints those)
    assert summary["entry_bytes"] == 24 and "events_per_s" not in summary


def test_rpc_log_csv_is_read_as_an_rpc_log_not_as_text(tmp_path: Path) -> None:
    # an RPC-log CSV without keys (what rpc dissect reads) and a header-only one: before, both were
    # tokenised as English text (the column names counted as words); now they are RPC logs and say why
    # they have no key stream
    header = ("rpc_id,worker_id,server_id,connection_id,iteration,op,request_bytes,response_bytes,num_keys,"
              "client_issue_ns,client_send_start_ns,client_send_end_ns,client_recv_end_ns,client_done_ns,"
              "server_recv_start_ns,server_recv_end_ns,server_proc_start_ns,server_proc_end_ns,server_send_end_ns")
    log = tmp_path / "rpc_log.csv"
    log.write_text(header + "\n0,0,0,0,0,pull_sparse,100,200,3,0,0,0,135000,135000,50000,50000,50000,85000,85000\n")
    only_header = tmp_path / "header_only.csv"
    only_header.write_text(header + "\n")
    for cmd in ("skew", "offload"):
        for path in (log, only_header):
            res = runner.invoke(app, ["rpc", cmd, str(path)])
            assert res.exit_code == 2, (cmd, path, res.output)
            assert "an RPC log needs columns ['keys'] for key analysis" in res.output, (cmd, res.output)
    keys_header = tmp_path / "keys_header.csv"
    keys_header.write_text("iteration,op,keys\n")
    res = runner.invoke(app, ["rpc", "skew", str(keys_header)])
    assert res.exit_code == 2, res.output
    assert "column 'keys' must be a list of integers, got String; CSV cannot hold lists" in res.output


def test_a_csv_table_read_as_text_is_warned_about(tmp_path: Path) -> None:
    people = tmp_path / "people.csv"
    people.write_text("name,city,age\nbob,paris,3\nann,rome,4\n")
    res = runner.invoke(app, ["rpc", "skew", str(people), "--format", "json"])
    assert res.exit_code == 0, res.output
    assert "looks like a table (header: name, city, age)" in res.output
    assert "use --kind (rpc_log, update_table) or --column NAME" in res.output
    # still read as text: name city age bob paris ann rome = 7 words (digits are not letters)
    assert '"events": 7,' in res.output and '"distinct_keys": 7,' in res.output
    res = runner.invoke(app, ["rpc", "skew", str(people), "--kind", "text", "--format", "json"])
    assert res.exit_code == 0 and "looks like a table" not in res.output  # the user chose text
    res = runner.invoke(app, ["rpc", "skew", str(people), "--column", "city", "--format", "json"])
    assert res.exit_code == 0 and "looks like a table" not in res.output
