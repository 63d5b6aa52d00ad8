"""Agreement of ``ddlscope trace`` with Holistic Trace Analysis on every shared trace, as a table.

For each file (or set of per-rank files): ddlscope's temporal shares (``TraceAnalysis.temporal``:
idle, compute, non-compute, communication/computation overlap, in %) beside HTA 0.5's
``get_temporal_breakdown`` and ``get_comm_comp_overlap`` (``include_last_profiler_step=True``; in a
fresh process each, once with HTA's defaults and once with ``HTA_DISABLE_NS_ROUNDING=1``), and the
largest difference in percentage points. Traces with fewer than two ProfilerStep markers, which
HTA analyses whole, are compared with ``--whole-trace``. tests/measure/test_trace_hta.py asserts
the same within 1 point.

Usage: ``python benchmarks/trace_hta_agreement.py`` (needs ``holistictraceanalysis``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from ddlscope.measure.analysis import analyze_traces  # noqa: E402

HTA = r"""
import json, logging, sys, warnings
warnings.simplefilter("ignore"); logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
files = json.loads(sys.argv[1])
ta = TraceAnalysis(trace_files=dict(enumerate(files)), trace_dir="/", include_last_profiler_step=True)
tb = ta.get_temporal_breakdown(visualize=False)
ov = ta.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"]
print(json.dumps([[float(r.idle_time_pctg), float(r.compute_time_pctg), float(r.non_compute_time_pctg), float(o)]
                  for r, o in zip(tb.itertuples(), ov, strict=True)]))
"""


def _shared() -> Path:
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    raise SystemExit("shared/data not found")


def _sets(data: Path, tmp: Path) -> dict[str, tuple[list[str], bool]]:
    h = data / "hta_traces"
    with tarfile.open(data / "param_dlrm" / "dlrm_kineto.tar.gz") as tar:
        tar.extractall(tmp, filter="data")
    return {
        "nccl_parser_config/nccl_data": ([str(h / "nccl_parser_config/nccl_data.json.gz")], False),
        "df_index_resolver": ([str(h / "df_index_resolver/df_index_resolver.json.gz")], False),
        "negative_queue_length_values_check": ([str(h / "negative_queue_length_values_check/rank0.json.gz")], False),
        "trace_diff/control": ([str(h / "trace_diff/control/control.json.gz")], False),
        "trace_diff/test": ([str(h / "trace_diff/test/test.json.gz")], False),
        "trace_filter (2 ranks)": (sorted(str(p) for p in (h / "trace_filter").glob("*.json.gz")), False),
        "critical_path/alexnet": ([str(p) for p in (h / "critical_path/alexnet").glob("*.json.gz")], True),
        "ns_resolution_trace": ([str(p) for p in (h / "ns_resolution_trace").glob("*.json.gz")], False),
        "param_dlrm/resnet_kineto": ([str(data / "param_dlrm/resnet_kineto.json.gz")], True),
        "param_dlrm/dlrm_kineto (8 ranks)": (sorted(str(p) for p in tmp.rglob("*.json")), True),
    }


def _hta(files: list[str], env: dict[str, str]) -> list[list[float]]:
    out = subprocess.run([sys.executable, "-c", HTA, json.dumps(files)], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fmt(values: list[float | None]) -> str:
    return " / ".join("-" if v is None or v != v else f"{v:.2f}" for v in values)


def _diff(ours: list[float | None], theirs: list[float]) -> float:
    return max(abs(a - b) for a, b in zip(ours, theirs, strict=True) if a is not None and b == b)


def main() -> None:
    """Print the agreement table (markdown)."""
    print("| trace | rank | ddlscope idle / compute / non-compute / overlap (%) | HTA (defaults) "
          "| max diff (pp) | max diff, HTA without ns rounding (pp) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (files, whole) in _sets(_shared(), Path(tmp)).items():
            ours = analyze_traces(files, whole_trace=whole).temporal.sort("rank")
            default, exact = _hta(files, {}), _hta(files, {"HTA_DISABLE_NS_ROUNDING": "1"})
            for i, row in enumerate(ours.iter_rows(named=True)):
                mine = [row["idle_pct"], row["compute_pct"], row["non_compute_pct"], row["comm_overlap_pct"]]
                label = name + (" (whole trace)" if whole else "")
                print(f"| {label} | {row['rank']} | {_fmt(mine)} | {_fmt(default[i])} | {_diff(mine, default[i]):.2f} "
                      f"| {_diff(mine, exact[i]):.2f} |")


if __name__ == "__main__":
    main()
