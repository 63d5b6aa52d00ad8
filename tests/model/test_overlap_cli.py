"""`ddlscope predict` shows exposed and hidden communication per link (the scheduled overlap)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app

runner = CliRunner()


def test_predict_json_has_exposed_and_hidden_per_link():
    res = runner.invoke(app, ["predict", "-a", "allreduce_cluster", "-w", "16", "--format", "json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)[0]
    assert row["overlap_fraction"] is None  # scheduled, the default
    for link in ("pcie", "nvlink", "network"):
        # each link's time splits into exposed and hidden
        assert row[f"{link}_exposed_s"] + row[f"{link}_hidden_s"] == pytest.approx(row[f"{link}_s"])
    # exposed communication = the links' exposed time + the wait for the slowest rank
    exposed = sum(row[f"{x}_exposed_s"] for x in ("pcie", "nvlink", "network")) + row["sync_wait_s"]
    assert row["exposed_comm_s"] == pytest.approx(exposed)
    assert row["sync_wait_s"] > 0


def test_predict_table_shows_the_split_and_overlap_none_keeps_the_additive_model():
    res = runner.invoke(app, ["predict"])
    assert res.exit_code == 0, res.output
    assert "exposed_s" in res.output and "hidden_s" in res.output and "sync_wait" in res.output
    assert "overlap: scheduled (buckets behind the backward" in res.output
    res = runner.invoke(app, ["predict", "--overlap", "none", "--format", "json"])
    row = json.loads(res.output)[0]
    assert row["exposed_comm_s"] == pytest.approx(row["comm_s"]) and row["hidden_comm_s"] == pytest.approx(0.0)


def _overlap_line(args: list[str]) -> tuple[str, dict]:
    """predict's ``overlap`` line (its wrapping undone) and the same job's JSON row."""
    res = runner.invoke(app, ["predict", *args])
    assert res.exit_code == 0, res.output
    lines = res.output.split("\n")
    start = next(i for i, x in enumerate(lines) if x.startswith("overlap: "))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("host (fixed per step)"))
    # stdout only: a warning on stderr (e.g. 3d on a workload without its layer shape) is not JSON
    row = json.loads(runner.invoke(app, ["predict", *args, "--format", "json"]).stdout)[0]
    return "".join(lines[start:end]), row


def test_predict_overlap_line_says_what_the_fsdp_and_3d_schedules_do():
    fsdp = ["-a", "fsdp", "-w", "16", "-s", "dgx-a100"]
    line, row = _overlap_line(fsdp)
    k = row["num_gradient_tensors"]
    comm, compute = row["comm_s"], row["compute_bound_s"] + row["memory_bound_s"]
    # FSDP prefetch: exposed = comm/k + max(0, comm (1 - 1/k) - compute), so hidden = min(comm (1 - 1/k), compute)
    hidden = min(comm * (1 - 1 / k), compute)
    assert line == (f"overlap: scheduled (FSDP prefetch over {k} units: each unit's collectives run while the unit "
                    f"before it computes; 1/{k} of the communication (the first unit's) and what outlasts the "
                    f"compute stay exposed, plus the wait for the slowest rank; hidden {hidden:.4g} s of "
                    f"{comm:.4g} s communication)")
    assert "buckets behind the backward" not in line
    line, row = _overlap_line(["-a", "3d", "-w", "32", "-s", "dgx-a100", "--parallel", "tp=4,pp=2,microbatches=8"])
    assert row["exposed_comm_s"] == pytest.approx(row["comm_s"] + row["sync_wait_s"]) and row["comm_s"] > 0
    assert line == ("overlap: scheduled (3d hides nothing: TP all-reduces on the critical path, blocking pipeline "
                    "sends, the DP all-reduce after the last micro-batch (Megatron without --overlap-grad-reduce); "
                    f"exposed: all communication plus the wait for the slowest rank; hidden 0 s of "
                    f"{row['comm_s']:.4g} s communication)")
    # a fraction is the same fraction model for every architecture
    line, _ = _overlap_line(["-a", "3d", "-w", "32", "-s", "dgx-a100", "--overlap", "0.5"])
    assert line == "overlap: 0.5 (fraction 0.5)"


def test_overlap_note_only_for_the_kinds_with_their_own_schedule():
    from ddlscope.model.arch_costs import overlap_note

    assert overlap_note("allreduce_cluster") is None and overlap_note("ps_worker") is None
    assert overlap_note("fsdp", 7).startswith("FSDP prefetch over 7 units:") and "1/7 of the" in overlap_note("fsdp", 7)
    assert overlap_note("3d").startswith("3d hides nothing")
