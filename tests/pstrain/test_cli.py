"""The ``ddlscope ps-train`` command: options, bad input, the output folder, interruptions, and short
runs as a user types them."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
from rich.console import Console
from typer.testing import CliRunner

import ddlscope
from ddlscope.cli import pstrain as cli_pstrain
from ddlscope.cli.main import app
from ddlscope.pstrain import launcher
from ddlscope.pstrain.launcher import Progress

from .conftest import live_processes_mentioning

runner = CliRunner()


def test_help_lists_the_options():
    result = runner.invoke(app, ["ps-train", "--help"])
    assert result.exit_code == 0
    for option in ("--workers", "--servers", "--mode", "--connections", "--max-connections", "--bandwidth-mbit",
                   "--otlp", "--log-format", "--out", "--stall-timeout"):
        assert option in result.output
    # the default input is found, not bundled: the help says where it is looked for
    text = " ".join(result.output.replace("│", " ").split())
    assert "bundled" not in text and "$DDLSCOPE_SHARED_DATA" in text and "text/tinyshakespeare.txt" in text


def _text(result) -> str:
    return " ".join(result.output.split())  # undo the console's line wrapping


def test_bad_options_are_user_errors(tmp_path):
    result = runner.invoke(app, ["ps-train", "--mode", "bsp", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "mode" in _text(result) and "sync" in _text(result)
    result = runner.invoke(app, ["ps-train", "--inject-failure", "worker:x", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "expected worker:ID:ITERATION or server:ID:RPCS" in _text(result)
    result = runner.invoke(app, ["ps-train", "--data", str(tmp_path / "none.txt"), "-o", str(tmp_path)])
    assert result.exit_code == 2 and _text(result).startswith("error: --data ")
    assert "none.txt: no such file" in result.output.replace("\n", "")
    # messages name the options, never internal fields or the whole configuration
    for args, expected in [
        (["--max-connections", "0"], "error: --max-connections: Input should be greater than or equal to 1 (got 0)"),
        (["--bandwidth-mbit", "-5"], "error: --bandwidth-mbit: Input should be greater than 0 (got -5.0)"),
        (["--inject-failure", "worker:9:5"], "error: --inject-failure worker:9:5: there is no worker 9 (--workers 2: "
                                             "ids 0 to 1)"),
        (["--inject-failure", "worker:0:-1"], "error: --inject-failure 'worker:0:-1': ITERATION must be 0 or more, "
                                              "got -1"),
        (["--data", str(tmp_path)], f"error: --data {tmp_path}: is a folder; expected a file"),
        (["--server-threads", "3"], "error: --server-threads 3: a sync run of 2 workers needs at least 4 handler "
                                    "threads per server"),
    ]:
        result = runner.invoke(app, ["ps-train", *args, "-o", str(tmp_path / "new")])
        assert result.exit_code == 2 and _text(result).startswith(expected), (args, _text(result))
        assert "RunConfig" not in result.output and "{" not in result.output
    assert not (tmp_path / "new").exists()
    # a folder with files of its own is never overwritten
    (tmp_path / "mine.txt").write_text("keep")
    result = runner.invoke(app, ["ps-train", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "not written by ps-train" in _text(result)
    assert (tmp_path / "mine.txt").read_text() == "keep"


def test_rejected_run_leaves_the_previous_results(tmp_path, shared_data):
    """Bad input is found before the output folder is touched: the previous run's results stay."""
    out = tmp_path / "out"
    out.mkdir()
    previous = {launcher.MARKER: "marker", "rpcs.parquet": "previous log", "run.json": '{"status": "ok"}',
                "logs/worker-0.log": "previous"}
    for name, content in previous.items():
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_text(content)
    bad = tmp_path / "crit_badlabel.txt"
    lines = (shared_data / "criteo" / "criteo_sample.txt").read_text().splitlines()[:6]
    lines[3] = "2" + lines[3][1:]
    bad.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["ps-train", "-o", str(out), "-n", "3", "--model", "ctr", "--data", str(bad)])
    assert result.exit_code == 2  # the error line alone: no progress bar for a run that never started
    assert _text(result) == f"error: {bad}, line 4, field label: expected 0 or 1, got '2'"
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == sorted([*previous, "logs"])
    assert all((out / name).read_text() == content for name, content in previous.items())
    # too few samples for the workers is found up front too (it used to fail a worker at run time)
    one = tmp_path / "one.txt"
    one.write_text("\n".join(lines[:2]) + "\n")
    result = runner.invoke(app, ["ps-train", "-q", "-o", str(out), "--model", "ctr", "--data", str(one)])
    assert result.exit_code == 2 and _text(result) == f"error: {one}: 1 sample(s); --workers 2 need at least one each"
    assert (out / "rpcs.parquet").read_text() == "previous log"


def test_ctr_run_with_csv_log_and_a_pool_of_one(tmp_path, shared_data):
    out = tmp_path / "ctr"
    # a previous run's outputs in other formats are replaced (not left beside the new ones)
    (out / "raw").mkdir(parents=True)
    for name in (launcher.MARKER, "rpcs.parquet", "raw/client-0.rows"):
        (out / name).write_text("previous")
    result = runner.invoke(app, [
        "ps-train", "--model", "ctr", "--data", str(shared_data / "criteo" / "criteo_sample.txt"),
        "--mode", "async", "--max-connections", "1", "-n", "30", "-o", str(out), "--log-format", "csv",
        "--format", "json",
    ])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    # 1 table + 4 dense tensors on 2 servers: per worker and iteration 2 pull_sparse + 2 pull_dense + same pushes
    assert summary["rpcs"] == 2 * 30 * 8
    assert summary["rpcs_excluded"] == {} and summary["timestamp_order_violations"] == {"client": 0, "server": 0}
    assert summary["loss_last"] < summary["loss_first"]
    log = pl.read_csv(out / "rpcs.csv")
    # each RPC goes to the other server than the one before it, so (nearly) every RPC opens a connection;
    # a pool of one never holds two: per worker, connection lifetimes do not overlap
    assert set(log["connection_event"].unique()) == {"new", "reconnect"}
    spans = (log.group_by("worker_id", "connection_id")
             .agg(pl.col("client_connect_start_ns").min().alias("open_ns"),
                  pl.col("client_done_ns").max().alias("last_ns"))
             .sort("worker_id", "open_ns"))
    overlap = spans.with_columns(prev_last=pl.col("last_ns").shift(1).over("worker_id")).filter(
        pl.col("open_ns") < pl.col("prev_last"))
    assert overlap.height == 0
    assert pl.read_csv(out / "key_updates.csv")["updates"].sum() == log.filter(
        pl.col("op") == "push_sparse")["num_keys"].sum()
    assert sorted(p.name for p in out.iterdir()) == [launcher.MARKER, "iterations.csv", "key_updates.csv", "logs",
                                                     "rpcs.csv", "run.json", "vocabulary.csv"]


def test_interrupted_run_joins_what_was_logged(tmp_path, shared_data, monkeypatch):
    """Ctrl-C during training: the processes are stopped, the logs joined, run.json says interrupted,
    and the message says where it is. The signal is sent from the progress callback, inside the run."""
    update = cli_pstrain._ProgressView.update
    sent = []

    def interrupt_after_4_iterations(self, p: Progress) -> None:
        update(self, p)
        if p.phase == "training" and p.iterations_done >= 4 and not sent:
            sent.append(p.iterations_done)
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(cli_pstrain._ProgressView, "update", interrupt_after_4_iterations)
    out = tmp_path / "int"
    result = runner.invoke(app, ["ps-train", "-q", "-o", str(out), "-n", "100000", "--model", "ctr", "--data",
                                 str(shared_data / "criteo" / "criteo_sample.txt")])
    assert result.exit_code == 130 and sent
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "interrupted" and summary["interrupted_by"] == "SIGINT"
    assert summary["iterations_logged"] >= 4 and summary["failures"] == []
    assert pl.read_parquet(out / "rpcs.parquet").height == summary["rpcs"] > 0
    assert re.match(rf"interrupted by SIGINT after {summary['iterations_logged']} of 200000 iterations; every "
                    rf"worker and server process was stopped what was logged is in {out}: {summary['rpcs']:,} RPCs "
                    r"in rpcs.parquet, run.json \(status interrupted\), logs/$", _text(result)), _text(result)
    assert not list(out.glob(".running-*")) and live_processes_mentioning(str(out)) == []


def test_ctrl_c_while_starting_is_one_line(tmp_path, monkeypatch):
    # while the CLI's modules load (a real Ctrl-C lands in scipy's or matplotlib's import): simulated by an
    # import hook that raises KeyboardInterrupt when the ps-train command module is imported
    code = ("import sys\n"
            "class Interrupt:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'ddlscope.cli.pstrain':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "sys.argv = ['ddlscope', 'ps-train']\n"
            "from ddlscope.cli.main import main\n"
            "main()\n")
    env = {**os.environ, "PYTHONPATH": str(Path(ddlscope.__file__).resolve().parents[1])}  # this checkout
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (130, "interrupted\n")
    # while the input is read
    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(launcher, "load_input", interrupted)
    result = runner.invoke(app, ["ps-train", "-q", "-o", str(tmp_path / "o")])
    assert result.exit_code == 130
    assert result.output == "interrupted by SIGINT while reading the input; nothing was written\n"
    assert not (tmp_path / "o").exists()


def test_progress_line_fits_80_columns():
    console = Console(width=80, file=io.StringIO(), force_terminal=True, color_system=None)
    view = cli_pstrain._ProgressView(20_000, quiet=False, console=console)
    with view:
        view.update(Progress("done", 20_000, 20_000, 2.64, 240_000, 43.2))
    last = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", console.file.getvalue()).split("\r")[-1].strip()
    # 240,000 RPCs / 43.2 s = 5,556 RPCs/s
    assert re.fullmatch(r"done ━+ 20000/20000 it  loss 2\.640  5,556 RPCs/s 0:00:\d\d", last), last
    assert len(last) <= 80
