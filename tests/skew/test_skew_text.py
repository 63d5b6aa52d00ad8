"""Real data: the word tokens of tinyshakespeare (shared/data/text). The fitted exponent and the
top-1 % share are checked against values computed here independently: a separate tokeniser
(``re`` + ``collections.Counter``), a direct NumPy top-1 % share, and a separate numerical
maximisation of the same likelihood."""

from __future__ import annotations

import collections
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize

from ddlscope.skew.frequency import analyze_skew
from ddlscope.skew.streams import load_stream


@pytest.fixture(scope="module")
def text_path(shared_data: Path) -> Path:
    return shared_data / "text" / "tinyshakespeare.txt"


@pytest.fixture(scope="module")
def independent_counts(text_path: Path) -> np.ndarray:
    """Token counts by the documented rule (lower-case, maximal runs of a-z), computed with re."""
    tokens = re.findall(r"[a-z]+", text_path.read_text(encoding="utf-8").lower())
    return np.array(sorted(collections.Counter(tokens).values(), reverse=True), dtype=np.int64)


@pytest.fixture(scope="module")
def analysis(text_path: Path):
    return analyze_skew(load_stream(text_path))


def test_token_stream_matches_independent_tokeniser(analysis, independent_counts: np.ndarray) -> None:
    assert analysis.num_events == independent_counts.sum() == 208_503
    assert analysis.num_keys == independent_counts.size == 11_455
    assert np.array_equal(analysis.ranks["count"].to_numpy(), independent_counts)
    assert analysis.ranks["label"].head(3).to_list() == ["the", "and", "i"]


def test_top_1pct_share_matches_direct_numpy(analysis, independent_counts: np.ndarray) -> None:
    k = math.ceil(0.01 * independent_counts.size)  # ceil(114.55) = 115 keys
    assert k == 115
    direct = independent_counts[:k].sum() / independent_counts.sum()
    row = analysis.coverage.filter(analysis.coverage["top_fraction"] == 0.01).row(0, named=True)
    assert row["top_keys"] == 115
    assert row["share"] == pytest.approx(direct, rel=1e-12)
    assert row["share"] == pytest.approx(0.5563, abs=5e-5)  # the reported value: 55.6 % of tokens


def test_zipf_exponent_matches_independent_maximisation(analysis, independent_counts: np.ndarray) -> None:
    f = independent_counts.astype(float)
    log_r = np.log(np.arange(1, f.size + 1))

    def neg_loglik(s: float) -> float:  # -[-s Σ f_r ln r - M ln Σ_r r^-s]
        return s * float(f @ log_r) + f.sum() * math.log(float(np.sum(np.exp(-s * log_r))))

    ref = optimize.minimize_scalar(neg_loglik, bounds=(0.2, 3.0), method="bounded", options={"xatol": 1e-10})
    assert analysis.zipf.s == pytest.approx(ref.x, abs=1e-6)
    assert analysis.zipf.log_likelihood == pytest.approx(-ref.fun, rel=1e-12)
    assert analysis.zipf.s == pytest.approx(0.98994, abs=5e-5)  # the reported value


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # powerlaw 2.0 warns about its own API
def test_csn_fit_on_text_agrees_with_powerlaw_package(analysis, independent_counts: np.ndarray) -> None:
    powerlaw = pytest.importorskip("powerlaw")
    pl_fit = analysis.power_law
    assert pl_fit is not None
    ref = powerlaw.Fit(independent_counts, discrete=True, verbose=0)  # its own xmin scan
    assert pl_fit.xmin == ref.xmin == 6
    assert pl_fit.alpha == pytest.approx(ref.power_law.alpha, abs=1e-4)
    r_ref, p_ref = ref.distribution_compare("power_law", "lognormal")
    assert analysis.comparison.log_likelihood_ratio == pytest.approx(r_ref, abs=1e-3)
    assert analysis.comparison.p_value == pytest.approx(p_ref, rel=1e-2)
    # word frequencies of this text: the log-normal fits the tail better (R < 0, p < 0.1)
    assert analysis.comparison.favoured == "lognormal"
