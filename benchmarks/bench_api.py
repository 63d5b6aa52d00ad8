"""Time of a one-job ``ddlscope.predict`` (one workload, one architecture, one system) through the
Python API, beside a per-configuration calculator (llm-analysis' ``LLMAnalysis.training``) in the
same run.

Goal (issue 18): under 1 ms per call (it was 5.7 ms when a one-row Polars query priced the job).
Timed: the median over repeats of ``number`` back-to-back calls, after a warm-up, for ResNet-50
(PS/Worker, 8 workers x 2 PS, scheduled overlap) and BERT-base (all-reduce over 2 x 8 V100s), and
the vectorised model on the same one-row table for reference.

llm-analysis pins ``transformers<5`` and ``huggingface-hub<0.15``, which ddlscope's own
``transformers>=5`` rules out in one environment; where it is not importable the benchmark says so.
To compare anyway, install it beside, without its pins:
``pip install --no-deps --target /tmp/llm_target llm-analysis "fire>=0.5,<0.6" termcolor`` and run
with ``PYTHONPATH=src:/tmp/llm_target``.

Run: ``PYTHONPATH=src python benchmarks/bench_api.py [--number 200]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable


def per_call_ms(fn: Callable[[], object], number: int, repeats: int = 7) -> float:
    """Median over ``repeats`` of the mean time of ``number`` calls, milliseconds."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200, help="calls per repeat")
    args = parser.parse_args()

    import ddlscope
    from ddlscope.model.jobs import job_row, jobs_frame
    from ddlscope.model.step_time import breakdown
    from ddlscope.specs.architecture import Architecture
    from ddlscope.specs.catalog import builtin_catalog

    cat = builtin_catalog()
    cases = {
        "resnet50 ps_worker 8w x 2ps, scheduled": (
            ddlscope.profile("resnet50", batch_size=64).workload,
            Architecture(kind="ps_worker", num_workers=8, num_ps=2),
            cat.system("pai-v100-nvlink-8"), "scheduled"),
        "bert_base allreduce_cluster 16 GPUs, none": (
            ddlscope.profile("bert_base", batch_size=32).workload,
            Architecture(kind="allreduce_cluster", num_workers=16), cat.system("pai-v100-nvlink-8"), "none"),
    }
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")
    for name, (w, arch, system, overlap) in cases.items():
        fast = per_call_ms(lambda w=w, a=arch, s=system, o=overlap: ddlscope.predict(w, a, s, overlap=o), args.number)
        jobs = jobs_frame([job_row(w, arch, system, overlap=overlap)])
        slow = per_call_ms(lambda j=jobs: breakdown(j), max(args.number // 10, 5))
        step = ddlscope.predict(w, arch, system, overlap=overlap)["step_s"].item()
        print(f"ddlscope.predict   {name:<42} {fast:7.3f} ms per call (step {step * 1e3:.1f} ms); "
              f"vectorised model on the one-row table {slow:6.2f} ms")
    try:
        import logging

        from llm_analysis.analysis import train
    except ImportError as exc:
        print(f"llm-analysis: not importable here ({exc}); it could not be installed beside ddlscope (it pins "
              "transformers<5 and huggingface-hub<0.15); see this file's docstring to compare anyway")
        return
    logging.getLogger("llm_analysis").setLevel(logging.ERROR)

    def llm() -> object:
        return train(model_name="facebook_opt-1.3b", gpu_name="a100-sxm-40gb", batch_size_per_gpu=4, seq_len=512,
                     total_num_gpus=8, tp_size=1, flops_efficiency=0.5, hbm_memory_efficiency=0.9, log_level="ERROR")

    ms = per_call_ms(llm, max(args.number // 10, 5))
    print(f"llm-analysis train facebook_opt-1.3b on 8 x a100-sxm-40gb               {ms:7.3f} ms per call")


if __name__ == "__main__":
    main()
