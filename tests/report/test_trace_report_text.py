"""The trace report's sentences on the shared 8-rank DLRM trace: the straggler is said once, with one
rounding, in the HTML report, ``summary.json``, the console and the rank-skew figure."""

from __future__ import annotations

import html
import json
import re

import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.measure.analysis import analyze_traces
from ddlscope.report.trace_report import headline_sentences, skew_figure, write_trace_report
from ddlscope.report.trace_tables import sections, summary

DLRM = ("param_dlrm/dlrm_kineto.tar.gz", "param_dlrm/dlrm_pytorch_et.tar.gz")


@pytest.fixture(scope="module")
def dlrm(shared_data):
    return analyze_traces([str(shared_data / p) for p in DLRM], scenarios=None)


def _expected(a) -> tuple[int, str]:
    """The straggler and its excess, computed here from the per-rank table: the rank with the most
    own time (step - exposed comm.), and its own time over the median rank's, in ms to 3 decimals."""
    own = a.skew.sort("rank")["own_us"].to_list()
    ranks = a.skew.sort("rank")["rank"].to_list()
    top = max(range(len(own)), key=own.__getitem__)
    s = sorted(own)
    median = (s[3] + s[4]) / 2  # 8 ranks
    return ranks[top], f"{(own[top] - median) / 1e3:.3f} ms"


def test_the_straggler_is_said_once_with_one_rounding(dlrm, tmp_path):
    a = dlrm
    assert a.skew.height == 8
    rank, excess = _expected(a)
    said = f"rank {rank}: {excess} more non-communication time per iteration than the median rank"

    head = [s for s in headline_sentences(a) if "straggler" in s.lower()]
    assert len(head) == 1 and head[0].startswith(f"Straggler: {said}, mostly ")
    summ = summary(a)
    assert summ["straggler"] == head[0].removeprefix("Straggler: ").removesuffix(".")

    index = write_trace_report(a, tmp_path / "report", sections(a, compact=True), summ, "trace")
    text = html.unescape(re.sub(r"<[^>]+>", " ", index.read_text()))
    text = re.sub(r"\s+", " ", text)
    assert text.count("non-communication time") == 1  # the headline only, not again in the Summary table
    assert text.count(said) == 1
    assert json.loads((tmp_path / "report" / "summary.json").read_text())["straggler"] == summ["straggler"]

    fig = skew_figure(a)
    assert [t.get_text() for t in fig.axes[0].texts] == [f"straggler\n+{excess}"]


def test_console_says_the_straggler_once(shared_data, dlrm):
    rank, excess = _expected(dlrm)
    res = CliRunner().invoke(app, ["trace", *(str(shared_data / p) for p in DLRM), "--no-whatif",
                                   "--format", "table"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    out = re.sub(r"\s+", " ", res.output)
    assert out.count("non-communication time") == 1
    assert f"rank {rank}: {excess} more non-communication time per iteration" in out


def test_straggler_sentence_says_what_the_other_components_add():
    from ddlscope.report.trace_tables import straggler_sentence

    # two ranks: the median is their mean; memory-bound +15.062 ms of a 10.441 ms excess, so the
    # others add -4.621 ms (hta_traces/trace_filter's figures)
    two = {"ranks": 2, "straggler_rank": 1, "straggler_excess_us": 10441.0, "slow_component": "memory_bound",
           "slow_component_excess_us": 15062.0}
    assert straggler_sentence(two) == (
        "rank 1: 10.441 ms more non-communication time per iteration than the mean of the 2 ranks (their "
        "median), mostly memory-bound (+15.062 ms; the others -4.621 ms together)")
    # eight ranks, the component under half of the excess: named as the largest, not "mostly"
    eight = {**two, "ranks": 8, "straggler_excess_us": 4000.0, "slow_component_excess_us": 1500.0}
    assert straggler_sentence(eight).endswith(
        "than the median rank, the largest component memory-bound (+1.500 ms; the others +2.500 ms together)")
    # within 5 % of the excess: the others are not mentioned
    close = {**eight, "slow_component_excess_us": 4100.0}
    assert straggler_sentence(close).endswith("mostly memory-bound (+4.100 ms)")
