"""The switch-offload simulation on tiny hand-made traces: every policy's hits, server updates,
bytes and installs computed by hand (arithmetic in the comments)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.skew.offload import (
    SpaceSaving,
    SwitchLayout,
    budgets_for,
    prepare_trace,
    simulate_offload,
)
from ddlscope.skew.streams import emulate_training, read_text_tokens, read_update_table

runner = CliRunner(env={"COLUMNS": "200"})

# entry = 2 values x 4 B + 8 B key + 8 B metadata = 24 B; a row message = 2 x 4 B + 8 B key = 16 B
LAYOUT = SwitchLayout(embedding_dim=2)


def test_layout_sizes() -> None:
    assert LAYOUT.entry_bytes == 24
    assert LAYOUT.message_bytes == 16
    assert LAYOUT.capacity_keys(71) == 2  # floor(71 / 24)
    default = SwitchLayout()  # 64 x 4 + 8 + 8 = 272 B per entry: 1 MiB holds floor(1048576 / 272) = 3855
    assert default.capacity_keys(2**20) == 3855


@pytest.fixture()
def push_trace(tmp_path: Path):
    """Pushes only (an update-count table, one update per row), keys a, b, c (ids 0, 1, 2):
    it0 (warm-up): a a b | it1: b b c | it2: c c c a | it3: a b."""
    rows = [(0, "a"), (0, "a"), (0, "b"), (1, "b"), (1, "b"), (1, "c"), (2, "c"), (2, "c"), (2, "c"), (2, "a"),
            (3, "a"), (3, "b")]
    p = tmp_path / "updates.parquet"
    pl.DataFrame({"iteration": [r[0] for r in rows], "key": [r[1] for r in rows],
                  "updates": [1] * len(rows)}).write_parquet(p)
    return prepare_trace(read_update_table(p))


def _sim(trace, capacity: int, **kw) -> pl.DataFrame:
    return simulate_offload(trace, LAYOUT, [capacity * LAYOUT.entry_bytes], warmup_iterations=1,
                            space_saving_counters=1, **kw).table


def test_static_by_hand(push_trace) -> None:
    t = _sim(push_trace, 1, policies=("static",)).row(0, named=True)
    # warm-up counts a 2, b 1 -> {a}. Evaluated pushes: it1 b b c (0 hits), it2 c c c a (1), it3 a b (1)
    assert t["pushes"] == 9
    assert t["push_aggregated_fraction"] == pytest.approx(2 / 9)
    # server updates = 9 - 2 aggregated + 2 forwards (a in it2, a in it3) = 9: nothing saved
    assert t["server_updates"] == 9
    assert t["switch_installs"] == 1
    # no pulls -> no write-backs; row messages 9 + 1 install = 10 vs 9: 16 B more than without a switch
    assert t["server_bytes_saved"] == -16
    t2 = _sim(push_trace, 2, policies=("static",)).row(0, named=True)
    # {a, b}: it1 b b (2), it2 a (1), it3 a b (2) = 5 hits; forwards it1 b, it2 a, it3 a, b = 4
    assert t2["push_aggregated_fraction"] == pytest.approx(5 / 9)
    assert t2["server_updates"] == 9 - 5 + 4


def test_lfu_by_hand(push_trace) -> None:
    t = _sim(push_trace, 1, policies=("lfu",)).row(0, named=True)
    # before it1: a 2, b 1 -> {a}: it1 b b c -> 0. After it1: a 2, b 3, c 1 -> {b}: it2 c c c a -> 0.
    # After it2: a 3, b 3, c 4 -> {c}: it3 a b -> 0. Installs a, b, c = 3
    assert t["push_aggregated_fraction"] == 0.0
    assert t["switch_installs"] == 3
    assert t["refreshes"] == 3
    t2 = _sim(push_trace, 2, policies=("lfu",)).row(0, named=True)
    # {a, b}: it1 b b (2); {b 3, a 2} = {a, b}: it2 a (1); {c 4, a 3 (tie with b 3: a seen first)}:
    # it3 a (1) -> 4 hits; installs a, b, then c = 3; forwards it1 b, it2 a, it3 a = 3
    assert t2["push_aggregated_fraction"] == pytest.approx(4 / 9)
    assert t2["switch_installs"] == 3
    assert t2["server_updates"] == 9 - 4 + 3


def test_space_saving_by_hand(push_trace) -> None:
    t = _sim(push_trace, 1, policies=("space_saving",)).row(0, named=True)
    # one counter. warm-up a a b: a1, a2, b replaces a -> b3. it1 sees {b}: b b -> 2 hits; then b4, b5,
    # c replaces -> c6. it2 sees {c}: c c c -> 3; then c7 c8 c9, a replaces -> a10. it3 sees {a}: a -> 1.
    assert t["push_aggregated_fraction"] == pytest.approx(6 / 9)
    assert t["switch_installs"] == 3
    # forwards: b (it1), c (it2), a (it3) -> server updates 9 - 6 + 3 = 6: a third saved
    assert t["server_updates"] == 6
    assert t["server_updates_saved_fraction"] == pytest.approx(1 / 3)
    # row messages 6 + 3 installs = 9 = baseline 9: bytes saved 0
    assert t["server_bytes_saved"] == 0
    t2 = _sim(push_trace, 2, policies=("space_saving",)).row(0, named=True)
    # two counters. warm-up: a1 a2 b1 -> {a2, b1}. it1 {a, b}: b b -> 2; b2 b3, c evicts a (2 < 3)
    # -> c3. it2 {b, c}: c c c -> 3; c4 c5 c6, a evicts b3 -> a4. it3 {c, a}: a -> 1. Total 6;
    # installs a, b, then c, then a = 4
    assert t2["push_aggregated_fraction"] == pytest.approx(6 / 9)
    assert t2["switch_installs"] == 4


def test_space_saving_more_counters_installs_the_top(push_trace) -> None:
    t = simulate_offload(push_trace, LAYOUT, [LAYOUT.entry_bytes], ("space_saving",), warmup_iterations=1,
                         space_saving_counters=2).table.row(0, named=True)
    # 1 entry, 2 counters (the summary of test_space_saving_by_hand with capacity 2), install the top:
    # before it1 {a2, b1} -> a: it1 0 hits; before it2 {b3, c3}: tie -> smaller key id b: it2 0;
    # before it3 {c6, a4} -> c: it3 0. 0 hits, 3 installs
    assert t["push_aggregated_fraction"] == 0.0
    assert t["switch_installs"] == 3


def test_oracle_by_hand(push_trace) -> None:
    t = _sim(push_trace, 1, policies=("oracle",)).row(0, named=True)
    # evaluated counts a 2, b 3, c 4 -> {c}: c in it1 (1), it2 (3) -> 4 hits; forwards it1, it2 = 2
    assert t["push_aggregated_fraction"] == pytest.approx(4 / 9)
    assert t["server_updates"] == 9 - 4 + 2
    t2 = _sim(push_trace, 2, policies=("oracle",)).row(0, named=True)
    # {c, b}: it1 b b c (3), it2 c c c (3), it3 b (1) = 7
    assert t2["push_aggregated_fraction"] == pytest.approx(7 / 9)


def test_space_saving_summary_guarantee() -> None:
    # every key with frequency > total / counters is monitored, and counts never underestimate
    rng = np.random.default_rng(0)
    keys = (rng.zipf(1.3, 20_000) % 500).tolist()
    ss = SpaceSaving(50)
    ss.update(keys)
    true = np.bincount(keys)
    est = ss.counts()
    assert len(est) == 50
    assert set(np.flatnonzero(true > len(keys) / 50)) <= set(est)
    assert all(c >= true[k] for k, c in est.items())
    assert sum(est.values()) == len(keys)  # Space-Saving's counts always sum to the stream length


def test_pulls_writebacks_and_bytes_by_hand(tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    p.write_text("a b a c  b b a a  a d a b")
    trace = prepare_trace(emulate_training(read_text_tokens(p), workers=2, batch_events=2))
    # it0: w0 {a b}, w1 {a c}; it1: w0 {b}, w1 {a}; it2: w0 {a d}, w1 {a b}; a pull and a push each
    t = simulate_offload(trace, LAYOUT, [LAYOUT.entry_bytes], ("static",), warmup_iterations=1).table.row(
        0, named=True)
    # warm-up pushes a 2, b 1, c 1 -> {a}. Evaluated: it1 b a, it2 a d a b: 6 pushes, 6 pulls
    assert (t["pushes"], t["pulls"]) == (6, 6)
    # a: 1 in it1 + 2 in it2 = 3 hits, for pushes and pulls alike
    assert t["push_aggregated_fraction"] == pytest.approx(0.5)
    assert t["pull_served_fraction"] == pytest.approx(0.5)
    # forwards (one per iteration with a pushed): 2 -> server updates 6 - 3 + 2 = 5
    assert t["server_updates"] == 5
    # row messages: pushes 3 + forwards 2 + pulls 3 + write-backs 2 + install 1 = 11 (baseline 12)
    assert t["switch_writebacks"] == 2
    assert t["server_bytes_baseline"] == 12 * 16
    assert t["server_bytes"] == 11 * 16
    assert t["server_bytes_saved_fraction"] == pytest.approx(1 / 12)


def test_budget_sweep_shape_and_monotone_oracle(tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    rng = np.random.default_rng(1)
    p.write_text(" ".join(f"w{'x' * int(k)}" for k in rng.zipf(1.4, 5000) % 300))
    stream = read_text_tokens(p)
    trace = prepare_trace(emulate_training(stream, workers=4, batch_events=100))
    budgets = budgets_for(stream.num_keys, LAYOUT, min_bytes=LAYOUT.entry_bytes)
    res = simulate_offload(trace, LAYOUT, budgets)
    assert res.table.height == 4 * len(budgets)
    assert LAYOUT.capacity_keys(budgets[-1]) >= stream.num_keys > LAYOUT.capacity_keys(budgets[-2])
    oracle = res.table.filter(pl.col("policy") == "oracle")["push_aggregated_fraction"].to_numpy()
    assert np.all(np.diff(oracle) >= 0)
    assert oracle[-1] == 1.0  # every key resident


def test_bad_arguments(push_trace) -> None:
    with pytest.raises(ValueError, match="policies"):
        simulate_offload(push_trace, LAYOUT, [100], ("lru",))
    with pytest.raises(ValueError, match=r"warmup_iterations: expected 1\.\.3"):
        simulate_offload(push_trace, LAYOUT, [100], warmup_iterations=4)


# -- the embedding dimension of an RPC log ------------------------------------------------------------

def _ps_log(tmp_path: Path, dim: int = 32, run_json: dict | None = None) -> Path:
    """A ps-train-style log: per iteration a pull_sparse of n keys (response = 60 B framing + n x dim x 4 B,
    pstrain.wire: 36 B header + 8 B array header + 2 x 8 B shape) and a push_sparse of the same keys."""
    client = {"client_issue_ns": 0, "client_send_start_ns": 10, "client_send_end_ns": 30, "client_recv_end_ns": 200,
              "client_done_ns": 210}
    server = {"server_recv_start_ns": 1000, "server_recv_end_ns": 1020, "server_proc_start_ns": 1050,
              "server_proc_end_ns": 1100, "server_send_end_ns": 1120}
    rows = []
    for it, keys in enumerate([[1, 2, 3], [1, 4], [1, 2, 5, 6], [2, 7]]):
        n = len(keys)
        common = {"worker_id": 0, "server_id": 0, "connection_id": 0, "iteration": it, "num_keys": n, "keys": keys,
                  **client, **server}
        rows.append({**common, "rpc_id": 2 * it, "op": "pull_sparse", "request_bytes": 60 + 8 * n,
                     "response_bytes": 60 + n * dim * 4})
        rows.append({**common, "rpc_id": 2 * it + 1, "op": "push_sparse", "request_bytes": 120 + n * (8 + dim * 4),
                     "response_bytes": 36})
    log = tmp_path / "rpcs.parquet"
    pl.DataFrame(rows).write_parquet(log)
    if run_json is not None:
        (tmp_path / "run.json").write_text(json.dumps(run_json))
    return log


def test_the_dimension_is_read_from_pull_response_sizes(tmp_path: Path) -> None:
    from ddlscope.skew.offload import choose_embedding_dim, embedding_dim_from_sizes

    frame = pl.read_parquet(_ps_log(tmp_path, dim=32))
    dim, detail = embedding_dim_from_sizes(frame)
    # slope of response bytes on keys: 32 x 4 = 128 B per key
    assert dim == 32
    assert detail == "pull_sparse responses grow by 128 B per key over 4 RPCs (R² 1.0000): 32 values of 4 B"
    assert choose_embedding_dim(None, tmp_path / "rpcs.parquet", frame).source == "message sizes"
    assert choose_embedding_dim(8, tmp_path / "rpcs.parquet", frame).dim == 8   # --dim overrides


def test_the_dimension_comes_from_run_json_first(tmp_path: Path) -> None:
    from ddlscope.skew.offload import choose_embedding_dim

    log = _ps_log(tmp_path, dim=16, run_json={"model": {"tables": [{"table_id": 0, "dim": 32},
                                                                   {"table_id": 1, "dim": 32}]}})
    chosen = choose_embedding_dim(None, log, pl.read_parquet(log))
    assert (chosen.dim, chosen.source) == (32, "run.json")
    assert chosen.detail == f"embedding dimension 32 from {tmp_path / 'run.json'}: model.tables dim 32"


def test_offload_of_a_ps_train_log_uses_its_dimension_not_64(tmp_path: Path) -> None:
    log = _ps_log(tmp_path, dim=32)
    res = runner.invoke(app, ["rpc", "offload", str(log), "-b", "64KiB", "-p", "static", "--warmup-iterations", "1",
                              "-f", "json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    # entry = 32 x 4 + 8 + 8 = 144 B (with the assumed 64: 272 B)
    assert summary["entry_bytes"] == 144 and summary["embedding_dim"] == 32
    assert summary["embedding_dim_source"] == "message sizes"
    assert "note: embedding dimension 32: pull_sparse responses grow by 128 B per key" in " ".join(res.output.split())


def test_offload_warns_when_the_dimension_must_be_assumed(tmp_path: Path) -> None:
    log = _ps_log(tmp_path, dim=32)
    pl.read_parquet(log).filter(pl.col("op") == "push_sparse").write_parquet(log)   # no pull responses
    res = runner.invoke(app, ["rpc", "offload", str(log), "-b", "64KiB", "-p", "static", "--warmup-iterations", "1",
                              "-f", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["entry_bytes"] == 272   # 64 x 4 + 8 + 8
    assert ("warning: embedding dimension not known (no " in " ".join(res.output.split())
            and "assuming 64; give --dim" in " ".join(res.output.split()))
