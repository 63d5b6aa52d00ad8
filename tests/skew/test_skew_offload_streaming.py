"""The streamed offload simulation (``rpc offload --streaming``) equals the in-memory one, row for row,
for every policy; and it refuses what it cannot stream."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.skew.offload import POLICIES, SwitchLayout, budgets_for, prepare_trace, simulate_offload
from ddlscope.skew.offload_streaming import replay_block, simulate_offload_streaming
from ddlscope.skew.streams import emulate_training, read_categorical_column

runner = CliRunner(env={"COLUMNS": "200"})
LAYOUT = SwitchLayout(embedding_dim=4)  # entry 4 x 4 + 8 + 8 = 32 B


def in_memory(path: Path, column: str, workers: int, batch_events: int, budgets: list[int] | None = None, **kw):
    """The in-memory simulation as ``rpc offload`` runs it (budgets_for the distinct keys by default)."""
    stream = read_categorical_column(path, column)
    trace = prepare_trace(emulate_training(stream, workers, batch_events))
    return simulate_offload(trace, LAYOUT, budgets or budgets_for(stream.num_keys, LAYOUT), **kw), stream


def assert_same(mem, streamed) -> None:
    """The table bit for bit, the summary and the notes equal."""
    assert mem.table.schema == streamed.table.schema
    assert mem.table.equals(streamed.table), f"\n{mem.table}\n{streamed.table}"
    assert json.dumps(mem.summary(), default=str) == json.dumps(streamed.summary(), default=str)
    assert (mem.notes, mem.warmup_iterations, mem.evaluation_iterations) == \
        (streamed.notes, streamed.warmup_iterations, streamed.evaluation_iterations)


def reference_pushes(keys: list[str], workers: int, batch_events: int, first_iteration: int) -> int:
    """Pushes of the evaluated iterations by the replay's definition, with Python sets: one per
    distinct key of each worker's mini-batch."""
    per_iter = workers * batch_events
    return sum(len(set(keys[a:a + batch_events])) for a in range(first_iteration * per_iter, len(keys), batch_events))


@pytest.mark.parametrize(("name", "column"), [("criteo_sample.txt", "C1"), ("criteo_sample.txt", "C3"),
                                              ("criteo_sample.txt", "C6"), ("avazu_sample.txt", "site_id"),
                                              ("avazu_sample.txt", "device_model")])
@pytest.mark.parametrize("chunk_rows", [7, 64, 1000])
def test_shared_ctr_samples_equal_in_memory(shared_data: Path, name: str, column: str, chunk_rows: int) -> None:
    """3 workers x 4 events = 12 events per iteration: none of the batch sizes divides it."""
    path = shared_data / "criteo" / name
    mem, stream = in_memory(path, column, 3, 4)
    s = simulate_offload_streaming(path, column, LAYOUT, workers=3, batch_events=4, chunk_rows=chunk_rows)
    assert_same(mem, s.result)
    assert s.rows == (200 if name.startswith("criteo") else 100)
    assert (s.num_events, s.num_keys, s.source) == (stream.num_events, stream.num_keys, stream.source)
    assert s.skipped == stream.skipped
    n_iter = math.ceil(s.num_events / 12)
    assert s.replay_note == emulate_training(stream, 3, 4).notes[-1]
    assert s.result.warmup_iterations == max(1, math.ceil(0.1 * n_iter))
    keys = stream.events["key"].to_list()
    pushes = reference_pushes(keys, 3, 4, s.result.warmup_iterations)
    assert (s.result.table["pushes"] == pushes).all() and (s.result.table["pulls"] == pushes).all()
    # with room for every key, the oracle holds every key of the evaluated iterations
    full = s.result.table.filter((pl.col("policy") == "oracle") & (pl.col("capacity_keys") >= s.num_keys))
    assert full["push_aggregated_fraction"].to_list() == [1.0]


def test_criteo_c3_figures(shared_data: Path) -> None:
    """C3 of the Criteo sample: 191 non-empty cells of 200, 171 distinct keys; 12 events per
    iteration make ceil(191 / 12) = 16 iterations, ceil(1.6) = 2 warm-up, 14 evaluated."""
    s = simulate_offload_streaming(shared_data / "criteo" / "criteo_sample.txt", "C3", LAYOUT, workers=3,
                                   batch_events=4, chunk_rows=64)
    assert (s.num_events, s.num_keys, s.skipped) == (191, 171, {"empty value": 9})
    assert (s.result.warmup_iterations, s.result.evaluation_iterations) == (2, 14)
    assert s.replay_note.startswith("replayed as training: 3 workers x 4 events per mini-batch = 16 iterations")
    assert s.spill_bytes == 191 * 4
    # budgets_for 171 keys of 32 B: 64 KiB holds them all, so the sweep doubles from one entry:
    # 32 B .. 8 KiB (256 keys >= 171), 9 budgets
    assert s.result.table.filter(pl.col("policy") == "static")["capacity_keys"].to_list() == \
        [1, 2, 4, 8, 16, 32, 64, 128, 256]
    # 1 replay for static, lfu and the oracle's counts, 1 for the oracle, 9 for Space-Saving (one per capacity)
    assert s.passes == 1 + 1 + 9


def _zipf_keys(n: int, support: int, s: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, support + 1) ** s
    return rng.choice(support, size=n, p=p / p.sum())


@pytest.fixture(scope="module")
def zipf_parts(tmp_path_factory) -> tuple[Path, Path]:
    """A SYNTHETIC Zipf stream (s = 1.1, 3 000 ranks, 30 000 cells, every 97th empty) as 4 Parquet
    partitions (row groups of 1 500) and as one CSV of the same rows."""
    tmp = tmp_path_factory.mktemp("zipf")
    keys = _zipf_keys(30_000, 3_000, 1.1, seed=11).astype(str).astype(object)
    keys[::97] = None
    folder = tmp / "parts"
    folder.mkdir()
    for i, part in enumerate(np.array_split(keys, 4)):
        pl.DataFrame({"feature": pl.Series(part.tolist(), dtype=pl.String)}).write_parquet(
            folder / f"part-{i}.parquet", row_group_size=1_500)
    one = tmp / "all.csv"
    pl.DataFrame({"feature": pl.Series(keys.tolist(), dtype=pl.String)}).write_csv(one)
    return folder, one


@pytest.mark.parametrize(("chunk_rows", "workers", "batch_events", "refresh", "warmup", "ss_counters"), [
    (3_000, 4, 250, 1, None, 4.0),   # 1 000 events per iteration: 3 iterations per block
    (2_500, 3, 111, 3, 5, 1.5),      # 333 per iteration: blocks of 7 iterations; refresh every 3
    (777, 8, 128, 2, 1, 1.0),        # 1 024 per iteration: a batch smaller than one iteration
])
def test_synthetic_zipf_partitions_equal_in_memory(zipf_parts, chunk_rows: int, workers: int, batch_events: int,
                                                   refresh: int, warmup: int | None, ss_counters: float) -> None:
    folder, one = zipf_parts
    budgets = [32, 3_200, 32_000, 96_000]  # 1, 100, 1 000, 3 000 keys
    mem, _ = in_memory(one, "feature", workers, batch_events, budgets, refresh_iterations=refresh,
                       warmup_iterations=warmup, space_saving_counters=ss_counters)
    s = simulate_offload_streaming(folder, "feature", LAYOUT, budgets, POLICIES, warmup, refresh, ss_counters,
                                   workers, batch_events, chunk_rows)
    assert len(s.files) == 4 and s.rows == 30_000 and s.batches >= 4
    assert s.skipped == {"empty value": len(range(0, 30_000, 97))}
    assert_same(mem, s.result)
    t = s.result.table
    # skew: a switch of 100 keys aggregates far more than 100 / 2 700 of the pushes; the oracle bounds the static set
    hundred = t.filter(pl.col("capacity_keys") == 100)
    assert (hundred["push_aggregated_fraction"] > 0.3).all()
    by = dict(zip(hundred["policy"], hundred["push_aggregated_fraction"], strict=True))
    assert by["oracle"] >= by["static"]


def test_policies_subset_and_order(zipf_parts) -> None:
    """Only the policies asked for, in the order asked; no oracle pass without the oracle."""
    _, one = zipf_parts
    mem, _ = in_memory(one, "feature", 4, 250, [3_200], policies=("space_saving", "static"))
    s = simulate_offload_streaming(one, "feature", LAYOUT, [3_200], ("space_saving", "static"), workers=4,
                                   batch_events=250, chunk_rows=4_000)
    assert_same(mem, s.result)
    assert s.result.table["policy"].to_list() == ["space_saving", "static"]
    assert s.passes == 1 + 1


def test_replay_block_by_hand() -> None:
    """2 workers x 3 events: iteration 0 = [a a b | b c b], iteration 1 = [c c (partial)].
    Mini-batch firsts: [a b | b c], [c]; first pushes of their key per iteration: a b (yes yes), b (no) c (yes); c."""
    a, b, c = 0, 1, 2
    blk = replay_block(np.array([a, a, b, b, c, b, c, c]), 0, 2, 3, 3)
    assert blk.keys.tolist() == [a, b, b, c, c]
    assert blk.starts.tolist() == [0, 4, 5]
    assert blk.first.tolist() == [True, True, False, True, True]


def _spill_dirs(root: Path) -> list[Path]:
    return list(root.glob("ddlscope-offload-*"))


def test_spill_removed_after_success_and_error(tmp_path: Path, monkeypatch, shared_data: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = shared_data / "criteo" / "criteo_sample.txt"
    simulate_offload_streaming(path, "C3", LAYOUT, [320], ("static",), workers=3, batch_events=4, chunk_rows=50)
    assert _spill_dirs(tmp_path) == []
    # 191 events at 8 x 1024 per iteration: 1 iteration, refused after the ids were spilled
    with pytest.raises(ValueError, match=r"at least 2 iterations.*--workers 8 --batch-events 2 gives 12 iterations"):
        simulate_offload_streaming(path, "C3", LAYOUT, chunk_rows=50)
    with pytest.raises(ValueError, match=r"warmup_iterations: expected 1\.\.15"):
        simulate_offload_streaming(path, "C3", LAYOUT, warmup_iterations=16, workers=3, batch_events=4)
    assert _spill_dirs(tmp_path) == []


def test_argument_errors_before_reading(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    for kw, msg in ((dict(chunk_rows=0), "chunk_rows"), (dict(workers=0), "workers and batch_events"),
                    (dict(policies=("lru",)), "policies"), (dict(refresh_iterations=0), "refresh_iterations"),
                    (dict(space_saving_counters=0.5), "space_saving_counters"),
                    (dict(warmup_iterations=0), "warmup_iterations"), (dict(budgets_bytes=[-1]), "budgets_bytes")):
        with pytest.raises(ValueError, match=msg):
            simulate_offload_streaming(missing, "a", **kw)
    with pytest.raises(FileNotFoundError):
        simulate_offload_streaming(missing, "a")
    empty = tmp_path / "e.csv"
    empty.write_text("a\n\n \n")
    with pytest.raises(ValueError, match="no key events found"):
        simulate_offload_streaming(empty, "a")
    with pytest.raises(ValueError, match=r"no column 'b' \(columns: a\)"):
        simulate_offload_streaming(empty, "b")


def test_cli_streaming_equals_in_memory(shared_data: Path) -> None:
    """``rpc offload --streaming`` prints the same JSON and CSV as without it, every policy."""
    src = str(shared_data / "criteo" / "criteo_sample.txt")
    for fmt in ("json", "csv"):
        args = ["rpc", "offload", src, "-c", "C1", "--workers", "3", "--batch-events", "4", "--dim", "4",
                "--refresh-iterations", "2", "--format", fmt]
        mem = runner.invoke(app, args)
        streamed = runner.invoke(app, [*args, "--streaming", "--chunk-rows", "7", "--no-progress"])
        assert mem.exit_code == 0 and streamed.exit_code == 0, streamed.output
        if fmt == "json":
            out = json.loads(streamed.stdout)
            assert out == json.loads(mem.stdout)
            assert {r["policy"] for r in out["rows"]} == set(POLICIES)
            # C1: 200 non-empty cells, ceil(200 / 12) = 17 iterations, ceil(1.7) = 2 warm-up, 15 evaluated
            assert out["evaluation_iterations"] == 15 and out["embedding_dim"] == 4
        else:
            assert streamed.stdout == mem.stdout
def test_cli_streaming_table_and_report(shared_data: Path, tmp_path: Path) -> None:
    src = str(shared_data / "criteo" / "criteo_sample.txt")
    table = runner.invoke(app, ["rpc", "offload", src, "-c", "C1", "--workers", "3", "--batch-events", "4",
                                "--dim", "4", "-p", "lfu", "--streaming", "--no-progress",
                                "--report", str(tmp_path / "rep")])
    assert table.exit_code == 0, table.output
    out = " ".join(table.output.split())
    assert f"Switch offload what-if: {src}:C1 (" in out and "(exact: equal to the in-memory simulation)" in out
    assert "replayed as training: 3 workers x 4 events per mini-batch = 17 iterations" in out
    assert (tmp_path / "rep" / "figures" / "offload.png").exists()


def test_cli_refusals(shared_data: Path, tmp_path: Path) -> None:
    src = str(shared_data / "criteo" / "criteo_sample.txt")
    for extra, msg in ((["--streaming"], "give --column NAME"),
                       (["-c", "C1", "--kind", "rpc_log", "--streaming"], "--kind rpc_log: --streaming reads one "
                                                                          "key column"),
                       (["-c", "C1", "--kind", "text", "--streaming"], "text, RPC logs and update-count tables"),
                       (["-c", "C1", "--streaming", "--chunk-rows", "0"], "--chunk-rows: expected >= 1, got 0")):
        res = runner.invoke(app, ["rpc", "offload", src, *extra])
        assert res.exit_code == 2, res.output
        assert msg in " ".join(res.output.split()), res.output
    lines = tmp_path / "k.jsonl"
    lines.write_text('{"k": "a"}\n')
    res = runner.invoke(app, ["rpc", "offload", str(lines), "-c", "k", "--streaming"])
    assert res.exit_code == 2 and "k.jsonl: JSON lines are not streamed" in " ".join(res.output.split())
    # the same hint as in memory when the replay gives one iteration
    res = runner.invoke(app, ["rpc", "offload", src, "-c", "C3", "--streaming", "--no-progress"])
    assert res.exit_code == 2
    assert "--workers 8 --batch-events 2 gives 12 iterations" in " ".join(res.output.split())


def test_more_keys_than_the_int32_spill_holds_is_refused(shared_data: Path, monkeypatch, tmp_path: Path) -> None:
    """The limit lowered to 5 keys: C3 of the Criteo sample has 171, so the first batch of 50 rows
    (more than 5 distinct values) stops the run, and the spill is removed."""
    import ddlscope.skew.offload_streaming as mod

    monkeypatch.setattr(mod, "MAX_SPILL_KEYS", 5)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(ValueError, match="more than 5 distinct keys: the streamed simulation spills int32 key ids"):
        simulate_offload_streaming(shared_data / "criteo" / "criteo_sample.txt", "C3", LAYOUT, chunk_rows=50)
    assert _spill_dirs(tmp_path) == []
