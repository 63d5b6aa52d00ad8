"""Streaming skew analysis (``rpc skew --streaming``) equals the in-memory one, figure for figure."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from ddlscope.skew.frequency import analyze_skew
from ddlscope.skew.streaming import analyze_skew_streaming, numpy_median_of, numpy_quantile_of
from ddlscope.skew.streams import read_categorical_column

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "criteo"
if not SHARED.exists():
    SHARED = Path("/work/shared/data/criteo")
TABLES = ("ranks", "coverage", "reuse", "churn")


def assert_same(mem, streamed) -> None:
    """Every table bit for bit and every summary figure equal (NaN equal to NaN)."""
    for name in TABLES:
        a, b = getattr(mem, name), getattr(streamed, name)
        assert a.schema == b.schema, name
        assert a.equals(b), f"{name}:\n{a}\n{b}"
    sa, sb = mem.summary(), streamed.summary()
    assert sa.keys() == sb.keys()
    for k, v in sa.items():
        w = sb[k]
        if isinstance(v, float) and math.isnan(v):
            assert isinstance(w, float) and math.isnan(w), k
        else:
            assert v == w, (k, v, w)
    assert (mem.zipf, mem.power_law, mem.lognormal, mem.comparison) == \
        (streamed.zipf, streamed.power_law, streamed.lognormal, streamed.comparison)
    assert (mem.skipped, mem.notes, mem.source, mem.kind) == (streamed.skipped, streamed.notes, streamed.source,
                                                              streamed.kind)


@pytest.mark.parametrize(("name", "column"), [("criteo_sample.txt", "C1"), ("criteo_sample.txt", "C3"),
                                              ("criteo_sample.txt", "C6"), ("avazu_sample.txt", "site_id"),
                                              ("avazu_sample.txt", "device_model")])
@pytest.mark.parametrize("chunk_rows", [7, 64, 1000])
def test_shared_ctr_samples_equal_in_memory(name: str, column: str, chunk_rows: int) -> None:
    path = SHARED / name
    mem = analyze_skew(read_categorical_column(path, column), window=13)
    s = analyze_skew_streaming(path, column, window=13, chunk_rows=chunk_rows)
    assert_same(mem, s.analysis)
    assert s.rows == 200 if name.startswith("criteo") else s.rows == 100


def test_criteo_hand_figures() -> None:
    """C6 of the Criteo sample: 200 rows, 32 empty cells (counted, not events)."""
    a = analyze_skew_streaming(SHARED / "criteo_sample.txt", "C6", chunk_rows=50).analysis
    assert a.num_events == 168 and a.skipped == {"empty value": 32}
    assert a.ranks["count"].sum() == 168


def _zipf_keys(n: int, support: int, s: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, support + 1) ** s
    return rng.choice(support, size=n, p=p / p.sum())


@pytest.mark.parametrize(("chunk_rows", "window"), [(3_000, 1_000), (2_500, 4_096), (50_000, 777)])
def test_synthetic_zipf_parquet_partitions_equal_in_memory(tmp_path: Path, chunk_rows: int, window: int) -> None:
    """A SYNTHETIC Zipf stream (s = 1.1, 5 000 ranks, some empty cells) as 4 Parquet partition files
    read as one stream, against the in-memory analysis of the same rows in one CSV."""
    keys = _zipf_keys(40_000, 5_000, 1.1, seed=3).astype(str).astype(object)
    keys[::97] = None
    folder = tmp_path / "parts"
    folder.mkdir()
    for i, part in enumerate(np.array_split(keys, 4)):
        pl.DataFrame({"feature": pl.Series(part.tolist(), dtype=pl.String), "other": np.arange(part.size)}) \
            .write_parquet(folder / f"part-{i}.parquet", row_group_size=1_500)
    one = tmp_path / "all.csv"
    pl.DataFrame({"feature": pl.Series(keys.tolist(), dtype=pl.String), "other": np.arange(keys.size)}).write_csv(one)
    mem = analyze_skew(read_categorical_column(one, "feature"), window=window)
    s = analyze_skew_streaming(folder, "feature", window=window, chunk_rows=chunk_rows)
    assert len(s.files) == 4 and s.rows == 40_000 and s.batches >= 4
    streamed = s.analysis
    # the source names differ (a folder vs one file): compare the rest
    streamed.source = mem.source
    assert_same(mem, streamed)
    assert mem.skipped == {"empty value": len(range(0, 40_000, 97))}


def test_synthetic_csv_high_cardinality(tmp_path: Path) -> None:
    """Many distinct keys (most seen once or twice): the LRU stack is most of the state."""
    keys = np.random.default_rng(5).integers(0, 30_000, 20_000)
    path = tmp_path / "keys.csv"
    pl.DataFrame({"k": keys}).write_csv(path)
    assert_same(analyze_skew(read_categorical_column(path, "k"), window=3_000),
                analyze_skew_streaming(path, "k", window=3_000, chunk_rows=1_234).analysis)


@pytest.mark.parametrize("n", [1, 2, 3, 10, 11, 101, 1_000, 12_345])
def test_numpy_quantile_replayed_bit_for_bit(n: int) -> None:
    x = np.sort(np.random.default_rng(n).integers(0, 10**9, n))
    for q in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
        assert numpy_quantile_of(lambda i: x[i], n, q) == float(np.quantile(x, q))
    assert numpy_median_of(x[(n - 1) // 2], x[n // 2], n) == float(np.median(x))


def test_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"t.csv: no column 'c' \(columns: a, b\)"):
        analyze_skew_streaming(path, "c")
    empty = tmp_path / "e.csv"
    empty.write_text("a\n\n \n")
    with pytest.raises(ValueError, match="no key events found"):
        analyze_skew_streaming(empty, "a")
    with pytest.raises(ValueError, match="chunk_rows"):
        analyze_skew_streaming(path, "a", chunk_rows=0)
    with pytest.raises(FileNotFoundError):
        analyze_skew_streaming(tmp_path / "nope", "a")


def test_cli_streaming_equals_in_memory(tmp_path: Path) -> None:
    """``rpc skew --streaming`` prints the same JSON figures and CSV ranks as without it."""
    import json

    from typer.testing import CliRunner

    from ddlscope.cli.main import app

    runner = CliRunner()
    src = str(SHARED / "criteo_sample.txt")
    for fmt in ("json", "csv"):
        args = ["rpc", "skew", src, "--column", "C3", "--window", "17", "--format", fmt]
        mem = runner.invoke(app, args)
        streamed = runner.invoke(app, [*args, "--streaming", "--chunk-rows", "33", "--no-progress"])
        assert mem.exit_code == 0 and streamed.exit_code == 0, streamed.output
        out = streamed.stdout
        if fmt == "json":
            assert json.loads(out) == json.loads(mem.stdout)
        else:
            assert out == mem.stdout
    bad = runner.invoke(app, ["rpc", "skew", src, "--streaming"])
    assert bad.exit_code != 0 and "give --column NAME" in bad.output
