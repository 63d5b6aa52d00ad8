"""Coverage, rank-frequency, hot-set churn and reuse distance on hand-made streams."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddlscope.skew.frequency import coverage, hot_set_churn, key_counts, rank_frequency
from ddlscope.skew.locality import reuse_distance_profile, reuse_distances, reuse_times


def test_coverage_by_hand() -> None:
    counts = np.array([1, 5, 0, 3, 1])  # 4 keys seen, 10 events
    cov = coverage(counts, (0.001, 0.5, 1.0))
    # top 0.1 %: max(1, ceil(0.004)) = 1 key -> 5/10; top 50 %: 2 keys -> (5+3)/10; all 4 -> 1
    assert cov["top_keys"].to_list() == [1, 2, 4]
    assert cov["share"].to_list() == pytest.approx([0.5, 0.8, 1.0])


def test_rank_frequency_ties_by_first_appearance() -> None:
    rf = rank_frequency(np.array([2, 3, 2, 0]))
    # key 1 (3), then keys 0 and 2 tie at 2 -> smaller id (earlier first appearance) first
    assert rf["key"].to_list() == [1, 0, 2]
    assert rf["cum_share"].to_list() == pytest.approx([3 / 7, 5 / 7, 1.0])


def test_hot_set_churn_by_hand() -> None:
    a, b, c, d = 0, 1, 2, 3
    keys = [a, a, b, c, b, b, a, c, c, c, d, d, d]  # it0: a a b c | it1: b b a c c | it2: c d d d
    its = [0] * 4 + [1] * 5 + [2] * 4
    ev = pl.DataFrame({"key": keys, "count": [1] * len(keys), "iteration": its})
    counts = key_counts(ev, 4)  # a 3, b 3, c 4, d 3 -> global order c, a, b, d (ties by id)
    out, desc = hot_set_churn(ev, counts, hot_keys=1)
    assert desc == "iteration"
    # it0: a 2, b 1, c 1 -> hot {a}, own share 2/4
    # it1: b 2, c 2, a 1 -> tie b/c broken by global rank -> {c}; new -> churn 1; own 2/5; prev {a}: 1/5
    # it2: d 3, c 1 -> {d}; churn 1; own 3/4; prev {c}: 1/4
    assert out["entered"].to_list() == [None, 1, 1]
    assert out["churn"].to_list() == [None, 1.0, 1.0]
    assert out["hot_share"].to_list() == pytest.approx([0.5, 0.4, 0.75])
    assert out["prev_hot_share"].to_list()[1:] == pytest.approx([0.2, 0.25])
    # two hot keys: it0: a 2, then b/c tie at 1 -> c (global rank first) -> {a, c};
    # it1 {b, c} (a 1 dropped): b new -> churn 1/2; it2 {d, c}: d new -> 1/2
    out2, _ = hot_set_churn(ev, counts, hot_keys=2)
    assert out2["churn"].to_list() == [None, 0.5, 0.5]


def test_churn_windows_without_iterations() -> None:
    ev = pl.DataFrame({"key": [0, 0, 1, 1, 1, 2], "count": [1] * 6, "iteration": [None] * 6},
                      schema={"key": pl.Int64, "count": pl.Int64, "iteration": pl.Int64})
    out, desc = hot_set_churn(ev, key_counts(ev, 3), hot_keys=1, window=3)
    # windows of 3 events: [0 0 1] -> {0}; [1 1 2] -> {1}: churn 1
    assert desc == "3 events"
    assert out["churn"].to_list() == [None, 1.0]


def test_reuse_distance_by_hand() -> None:
    a, b, c, d = 0, 1, 2, 3
    keys = np.array([a, b, c, b, a, a, d, c])
    # t=3 b: prev 1, between {c} -> 1; t=4 a: prev 0, between {b, c} -> 2; t=5 a: 0;
    # t=7 c: prev 2, between {b, a, d} -> 3; first accesses -1
    assert reuse_distances(keys).tolist() == [-1, -1, -1, 1, 2, 0, -1, 3]
    assert reuse_times(keys).tolist() == [-1, -1, -1, 1, 3, 0, -1, 4]
    prof = reuse_distance_profile(reuse_distances(keys), np.array([1, 2, 4]))
    # LRU of 1 key hits distance < 1: one access (t=5); of 2: t=3, t=5; of 4: all four reuses; of 8 accesses
    assert prof["lru_hit_ratio"].to_list() == pytest.approx([1 / 8, 2 / 8, 4 / 8])


def _brute_force(keys: list[int]) -> list[int]:
    out = []
    for t, k in enumerate(keys):
        prev = max((j for j in range(t) if keys[j] == k), default=None)
        out.append(-1 if prev is None else len(set(keys[prev + 1:t])))
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=0, max_size=80))
def test_reuse_distance_matches_brute_force(keys: list[int]) -> None:
    assert reuse_distances(np.array(keys, dtype=np.int64)).tolist() == _brute_force(keys)


def test_reuse_distance_is_an_lru_simulation() -> None:
    # the hit ratio from stack distances equals a direct LRU cache simulation
    rng = np.random.default_rng(2)
    keys = rng.zipf(1.5, 3000) % 200
    dist = reuse_distances(keys)
    for size in (1, 8, 50):
        cache: list[int] = []
        hits = 0
        for k in keys.tolist():
            if k in cache:
                hits += 1
                cache.remove(k)
            elif len(cache) == size:
                cache.pop(0)
            cache.append(k)
        assert int((dist >= 0).sum() - (dist >= size).sum()) == hits
