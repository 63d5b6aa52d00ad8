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

import csv
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
        DataFormatError: not UTF-8 (names the line and byte offset) or fewer than 2 words.
    """
    path = Path(path)
    text = _decode(path, path.read_bytes(), "UTF-8 text for the word model")
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
        blank_lines: blank lines skipped.
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
    blank_lines: int = 0


MAX_REPORTED_LINES = 5
"""A data error names this many bad lines (and counts all of them)."""
_EXCERPT_CHARS = 60


def _excerpt(text: str) -> str:
    """A short, printable quote of ``text`` (control and non-ASCII characters escaped)."""
    cut = text[:_EXCERPT_CHARS]
    return ascii(cut) + ("..." if len(text) > _EXCERPT_CHARS else "")


def _decode(path: Path, raw: bytes, expected: str) -> str:
    """``raw`` as UTF-8; an error names the line and byte of the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataFormatError(f"{path}, line {line}: not UTF-8 text (byte {exc.start}: {exc.reason}); "
                              f"expected {expected}") from exc


def _report(path: Path, problems: list[tuple[int, str]], total_lines: int) -> DataFormatError:
    """One error naming the first :data:`MAX_REPORTED_LINES` problems ``(line, what)`` and their count."""
    problems = sorted(problems)
    if len(problems) == 1:
        line, what = problems[0]
        return DataFormatError(f"{path}, line {line}{what}")
    shown = "; ".join(f"line {line}{what}" for line, what in problems[:MAX_REPORTED_LINES])
    more = f"; and {len(problems) - MAX_REPORTED_LINES} more" if len(problems) > MAX_REPORTED_LINES else ""
    lines = len({line for line, _ in problems})
    return DataFormatError(f"{path}: {lines} malformed line(s) of {total_lines}: {shown}{more}")


def _sniff_ctr(path: Path, first: str) -> str:
    if not first.strip():
        raise DataFormatError(f"{path}: empty first line; expected Criteo or Avazu CTR samples")
    cols = first.split(",")
    if cols[:2] == ["label", "I1"]:
        missing = [c for c in ("label", *CRITEO_DENSE, *CRITEO_CATEGORICAL) if c not in cols]
        if missing:
            raise DataFormatError(f"{path}, line 1: Criteo header lacks column(s) {missing}")
        return "criteo_csv"
    if all(c in cols for c in AVAZU_REQUIRED):
        return "avazu"
    tabs = len(first.split("\t"))
    if tabs == 40:
        return "criteo_tsv"
    got = f"{tabs} tab-separated fields" if tabs > 1 else _excerpt(first)
    raise DataFormatError(
        f"{path}, line 1: expected a Criteo header 'label,I1..I13,C1..C26', 40 tab-separated Criteo columns "
        f"(Kaggle train.txt), or an Avazu header starting 'id,click,hour'; got {got}"
    )


def _split_lines(path: Path, text: str, first_data_line: int, sep: str, names: tuple[str, ...],
                 expected: str) -> tuple[pl.DataFrame, int]:
    """The data lines of ``text`` as a string table with one column per name plus ``line`` (the
    1-based line number in the file), and the number of blank lines skipped.

    Every line must have ``len(names)`` fields; fields containing a double quote follow CSV quoting
    (RFC 4180). Raises DataFormatError naming the lines that do not (and how many there are).
    """
    lines = pl.Series("text", [text]).str.split("\n").explode().str.strip_suffix("\r")
    ends_with_newline = text.endswith("\n")
    if ends_with_newline:
        lines = lines.head(lines.len() - 1)
    total = lines.len()
    frame = pl.DataFrame({"line": pl.int_range(1, total + 1, eager=True, dtype=pl.Int64), "text": lines})
    frame = frame.filter(pl.col("line") >= first_data_line)
    blank = frame["text"].str.strip_chars() == ""
    blank_lines = int(blank.sum())
    frame = frame.filter(~blank)
    fields = frame["text"].str.split(sep)
    quoted = frame["text"].str.contains('"', literal=True)
    if quoted.any():  # rare in CTR data: parse just those lines with the csv module
        parsed = fields.to_list()
        for i in quoted.arg_true().to_list():
            parsed[i] = next(csv.reader([frame["text"][i]], delimiter=sep))
        fields = pl.Series("text", parsed, dtype=pl.List(pl.String))
    counts = fields.list.len()
    bad = counts != len(names)
    if bad.any():
        rows = frame.with_columns(counts.alias("n")).filter(bad)
        problems = [(line, f": {n} field(s), expected {expected}") for line, n in rows.select("line", "n").rows()]
        last_line, last_n = rows.row(-1)[0], rows.row(-1)[2]
        if not ends_with_newline and last_line == total and last_n < len(names):
            problems[-1] = (last_line, problems[-1][1] + " (the file ends in this line without a newline: was it "
                                                         "cut short?)")
        raise _report(path, problems, total)
    table = pl.DataFrame({name: fields.list.get(i) for i, name in enumerate(names)}).with_columns(frame["line"])
    return table, blank_lines


def _numeric(frame: pl.DataFrame, column: str, dtype: pl.DataType) -> tuple[pl.Series, list[tuple[int, str]]]:
    """``column`` cast to ``dtype`` (empty = null), and the lines whose value does not parse."""
    raw = frame[column].str.strip_chars()
    values = frame.select(pl.when(raw == "").then(None).otherwise(raw).alias(column))[column]
    cast = values.cast(dtype, strict=False)
    bad = values.is_not_null() & cast.is_null()
    problems = [(line, f", field {column}: {_excerpt(v)} is not a number")
                for line, v in zip(frame["line"].filter(bad).to_list(), values.filter(bad).to_list(), strict=True)]
    return cast, problems


def load_ctr(path: Path, rows: int) -> CtrSamples:
    """Read Criteo or Avazu samples and hash their categorical features into ``rows`` keys.

    Every line must have the format's number of fields (40 for Criteo; the header's for Avazu),
    a label of 0 or 1, and numbers in the numeric fields; blank lines are skipped and counted
    (``blank_lines``). Line numbers in errors are those of the file (1 = the header, if any).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        DataFormatError: not UTF-8, an unknown header, lines with too few or too many fields (a
            file cut short mid-line included), a label that is not 0/1, or a numeric value that is
            not a number: one message names file, line, field and what was expected for the first
            few bad lines and counts them all; no samples; ``rows`` < 1.
    """
    path = Path(path)
    if rows < 1:
        raise DataFormatError(f"rows: expected at least 1 hash bucket, got {rows}")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    text = _decode(path, path.read_bytes(), "Criteo or Avazu CTR samples (CSV or tab-separated text)")
    if not text.strip():
        raise DataFormatError(f"{path}: empty file; expected Criteo or Avazu CTR samples")
    first = text.split("\n", 1)[0].rstrip("\r")
    kind = _sniff_ctr(path, first)
    if kind == "criteo_tsv":
        names, sep, first_data_line = ("label", *CRITEO_DENSE, *CRITEO_CATEGORICAL), "\t", 1
        expected = "40 tab-separated (label, I1..I13, C1..C26)"
    else:
        names, sep, first_data_line = tuple(first.split(",")), ",", 2
        expected = (f"{len(names)} (label, I1..I13, C1..C26)" if kind == "criteo_csv"
                    else f"{len(names)} (the header's columns)")
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise DataFormatError(f"{path}, line 1: column(s) {dup} appear more than once in the header")
    frame, blank_lines = _split_lines(path, text, first_data_line, sep, names, expected)
    if frame.height == 0:
        raise DataFormatError(f"{path}: no samples" + (" after the header" if first_data_line > 1 else ""))
    problems: list[tuple[int, str]] = []
    if kind == "avazu":
        label_col, dense_fields = "click", ()
        hour, bad_hours = _numeric(frame, "hour", pl.Int64)
        problems += bad_hours
        frame = frame.with_columns((hour % 100).cast(pl.String).alias("hour"))
        fields = tuple(c for c in names if c not in ("id", "click"))
        fmt = "avazu"
    else:
        label_col, dense_fields, fields, fmt = "label", CRITEO_DENSE, CRITEO_CATEGORICAL, "criteo"
    labels, bad_labels = _numeric(frame, label_col, pl.Float32)
    bad = (~labels.is_in([0.0, 1.0]) | labels.is_null()) & ~frame["line"].is_in([line for line, _ in bad_labels])
    problems += bad_labels + [(line, f", field {label_col}: expected 0 or 1, got {_excerpt(v)}")
                              for line, v in zip(frame["line"].filter(bad).to_list(),
                                                 frame[label_col].filter(bad).to_list(), strict=True)]
    dense = np.zeros((frame.height, len(dense_fields)), dtype=np.float32)
    for j, name in enumerate(dense_fields):
        x, bad_x = _numeric(frame, name, pl.Float64)
        problems += bad_x
        dense[:, j] = np.log1p(x.fill_null(0.0).clip(lower_bound=0.0).to_numpy())
    if problems:
        raise _report(path, problems, frame["line"].max() or 0)
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
                      feature_map=feature_map, source=path, blank_lines=blank_lines)
