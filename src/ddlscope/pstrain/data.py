"""Training data for the parameter-server runs: a word-level text corpus and CTR samples.

Two formats, each read from any user file:

* **text** (the word model): any UTF-8 text. Words are the lower-cased runs of letters with inner
  apostrophes (``[a-z]+('[a-z]+)*``); the vocabulary is every distinct word, and a word's key is
  its frequency rank (0 = most frequent), so hot embedding rows have small keys.
* **CTR** (the click-through-rate model): the Criteo display-advertising format (CSV with header
  ``label,I1..I13,C1..C26`` as in DeepCTR's samples, or the Kaggle ``train.txt`` layout of 40
  tab-separated columns without header) or the Avazu format (CSV with header
  ``id,click,hour,C1,banner_pos,...``). Categorical values are hashed per field into one shared
  embedding table (the "hashing trick", Weinberger et al., ICML 2009): key =
  ``hash(field + ":" + value) mod rows``; a missing value is its own category. Criteo's integer
  features enter the MLP as ``log(1 + max(x, 0))`` (missing = 0), the transform of the DLRM and
  DeepCTR Criteo examples.

Hashing uses Polars' ``Expr.hash`` (seed 0), stable within a Polars version, not across versions:
keys of the same file may differ between Polars releases (the run writes the key -> feature map).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

WORD_PATTERN = re.compile(r"[a-z]+(?:'[a-z]+)*")
"""A word: lower-cased letters with inner apostrophes (``o'er``, ``i'll``)."""

CRITEO_DENSE = tuple(f"I{i}" for i in range(1, 14))
CRITEO_CATEGORICAL = tuple(f"C{i}" for i in range(1, 27))
AVAZU_REQUIRED = ("id", "click", "hour")


class DataFormatError(ValueError):
    """A data file that does not follow the expected format; the message names file, line, field."""


@dataclass(frozen=True)
class TextCorpus:
    """A tokenised text.

    Attributes:
        tokens: int64 (n,), each word's key (its frequency rank).
        words: the vocabulary, ``words[key]``.
        counts: int64 (vocab,), occurrences of each word in the text.
        source: the file read.
    """

    tokens: np.ndarray
    words: tuple[str, ...]
    counts: np.ndarray
    source: Path

    def vocabulary(self) -> pl.DataFrame:
        """Columns ``key`` (Int64), ``feature`` (String, the word), ``count`` (Int64)."""
        return pl.DataFrame({"key": np.arange(len(self.words), dtype=np.int64), "feature": list(self.words),
                             "count": self.counts.astype(np.int64)})


def load_text(path: Path) -> TextCorpus:
    """Tokenise a UTF-8 text file into word keys ordered by frequency (ties: first occurrence).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        DataFormatError: not UTF-8 (names the byte offset) or fewer than 2 words.
    """
    path = Path(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    words = WORD_PATTERN.findall(text.lower())
    if len(words) < 2:
        raise DataFormatError(f"{path}: found {len(words)} word(s); the word model needs a text of at least 2 words")
    uniq, first, inverse, counts = np.unique(np.array(words, dtype=object), return_index=True,
                                             return_inverse=True, return_counts=True)
    # rank by count descending, then by first occurrence
    order = np.lexsort((first, -counts))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return TextCorpus(tokens=rank[inverse.ravel()], words=tuple(str(w) for w in uniq[order]),
                      counts=counts[order].astype(np.int64), source=path)


@dataclass(frozen=True)
class CtrSamples:
    """CTR samples with hashed categorical features.

    Attributes:
        keys: int64 (n, fields), each field's embedding key in ``[0, rows)``.
        dense: float32 (n, dense_features), log-transformed integer features (may have 0 columns).
        labels: float32 (n,), click 0/1.
        fields: the categorical field names, column order of ``keys``.
        dense_fields: the dense feature names.
        rows: the hash space (embedding table rows).
        format: ``criteo`` or ``avazu``.
        feature_map: columns ``key``, ``feature`` (``field:value``), ``count``: which values
            hashed to which key (several rows per key where values collide).
        source: the file read.
    """

    keys: np.ndarray
    dense: np.ndarray
    labels: np.ndarray
    fields: tuple[str, ...]
    dense_fields: tuple[str, ...]
    rows: int
    format: str
    feature_map: pl.DataFrame
    source: Path


def _read_csv(path: Path, **kwargs) -> pl.DataFrame:
    try:
        return pl.read_csv(path, infer_schema=False, **kwargs)
    except pl.exceptions.ComputeError as exc:
        raise DataFormatError(f"{path}: not a readable CSV file: {exc}") from exc


def _sniff_ctr(path: Path) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = fh.readline().rstrip("\r\n")
    if not first:
        raise DataFormatError(f"{path}: empty file; expected Criteo or Avazu CTR samples")
    cols = first.split(",")
    if cols[:2] == ["label", "I1"]:
        missing = [c for c in ("label", *CRITEO_DENSE, *CRITEO_CATEGORICAL) if c not in cols]
        if missing:
            raise DataFormatError(f"{path}, line 1: Criteo header lacks column(s) {missing}")
        return "criteo_csv"
    if all(c in cols for c in AVAZU_REQUIRED):
        return "avazu"
    if len(first.split("\t")) == 40:
        return "criteo_tsv"
    raise DataFormatError(
        f"{path}, line 1: expected a Criteo header 'label,I1..I13,C1..C26', 40 tab-separated Criteo columns "
        f"(Kaggle train.txt), or an Avazu header starting 'id,click,hour'; got {first[:80]!r}"
    )


def _numeric(frame: pl.DataFrame, column: str, path: Path, dtype: pl.DataType, line_offset: int) -> pl.Series:
    """``column`` cast to ``dtype`` (empty = null); a value that does not parse is an error naming its line."""
    raw = frame[column].str.strip_chars()
    raw = pl.when(raw == "").then(None).otherwise(raw)
    values = frame.select(raw.alias(column))[column]
    cast = values.cast(dtype, strict=False)
    bad = values.is_not_null() & cast.is_null()
    if bad.any():
        i = int(bad.arg_true()[0])
        raise DataFormatError(f"{path}, line {i + line_offset}, field {column}: {values[i]!r} is not a number")
    return cast


def load_ctr(path: Path, rows: int) -> CtrSamples:
    """Read Criteo or Avazu samples and hash their categorical features into ``rows`` keys.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        DataFormatError: an unknown header, a label that is not 0/1, or a dense value that is not a
            number (the message names file, line and field); ``rows`` < 1.
    """
    path = Path(path)
    if rows < 1:
        raise DataFormatError(f"rows: expected at least 1 hash bucket, got {rows}")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    kind = _sniff_ctr(path)
    if kind == "criteo_tsv":
        frame = _read_csv(path, separator="\t", has_header=False,
                          new_columns=["label", *CRITEO_DENSE, *CRITEO_CATEGORICAL])
        line_offset = 1
    else:
        frame = _read_csv(path)
        line_offset = 2
    if frame.height == 0:
        raise DataFormatError(f"{path}: no samples after the header")
    if kind == "avazu":
        label_col, dense_fields = "click", ()
        frame = frame.with_columns((_numeric(frame, "hour", path, pl.Int64, line_offset) % 100)
                                   .cast(pl.String).alias("hour"))
        fields = tuple(c for c in frame.columns if c not in ("id", "click"))
        fmt = "avazu"
    else:
        label_col, dense_fields, fields, fmt = "label", CRITEO_DENSE, CRITEO_CATEGORICAL, "criteo"
    labels = _numeric(frame, label_col, path, pl.Float32, line_offset)
    bad = ~labels.is_in([0.0, 1.0]) | labels.is_null()
    if bad.any():
        i = int(bad.arg_true()[0])
        raise DataFormatError(f"{path}, line {i + line_offset}, field {label_col}: expected 0 or 1, "
                              f"got {frame[label_col][i]!r}")
    dense = np.zeros((frame.height, len(dense_fields)), dtype=np.float32)
    for j, name in enumerate(dense_fields):
        x = _numeric(frame, name, path, pl.Float64, line_offset).fill_null(0.0).clip(lower_bound=0.0)
        dense[:, j] = np.log1p(x.to_numpy())
    feats = frame.select(
        (pl.lit(f"{name}:") + pl.col(name).fill_null("")).alias(name) for name in fields
    )
    keyed = feats.select((pl.col(name).hash(seed=0) % rows).cast(pl.Int64).alias(name) for name in fields)
    long_feats = feats.unpivot(variable_name="field", value_name="feature")
    long_keys = keyed.unpivot(variable_name="field", value_name="key")
    feature_map = (
        pl.DataFrame({"key": long_keys["key"], "feature": long_feats["feature"]})
        .group_by("key", "feature").agg(pl.len().cast(pl.Int64).alias("count"))
        .sort("key", "feature")
    )
    return CtrSamples(keys=keyed.to_numpy().astype(np.int64), dense=dense, labels=labels.to_numpy().astype(np.float32),
                      fields=fields, dense_fields=tuple(dense_fields), rows=rows, format=fmt,
                      feature_map=feature_map, source=path)
