"""``ddlscope catalog``: list the GPUs, links, servers and scenarios ddlscope knows."""

from __future__ import annotations

from typing import Annotated

import polars as pl
import typer

from ddlscope.cli.common import CatalogFiles, FormatOpt, user_catalog, user_errors
from ddlscope.report.console import FORMATS, emit, expected_one_of
from ddlscope.specs.efficiency import FITTABLE, FLASH_V1_RELATIVE_SPEED
from ddlscope.specs.scenario import BUILTIN_SCENARIOS
from ddlscope.specs.system import GENERATIONS

KINDS = ("gpus", "links", "servers", "scenarios", "efficiencies")


def register(app: typer.Typer) -> None:
    """Add ``catalog`` to ``app``."""

    @app.command()
    @user_errors
    def catalog(
        kind: Annotated[str, typer.Argument(help=f"one of {', '.join(KINDS)}")] = "servers",
        extra: CatalogFiles = None,
        sources: Annotated[bool, typer.Option("--sources", help="show each entry's datasheet source")] = False,
        fmt: FormatOpt = "table",
    ) -> None:
        """List the built-in catalog (plus --catalog files): GPUs, links, server types, scenarios, or the compute
        efficiencies per GPU generation (op-level pricing, ``docs/model.md``)."""
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        expected_one_of(fmt, FORMATS)
        cat = user_catalog(extra)
        if kind == "gpus":
            rows = [{"name": g.name, "fp32_tflops": g.peak_tflops.fp32, "tf32_tflops": g.peak_tflops.tf32,
                     "fp16_tflops": g.peak_tflops.fp16, "bf16_tflops": g.peak_tflops.bf16,
                     "memory_bandwidth_gb_s": g.memory_bandwidth_gb_s, "memory_gb": g.memory_gb,
                     # whole MiB, as nvidia-smi reports them (None where the catalog has only memory_gb)
                     "memory_mib": None if g.memory_mib is None else round(g.memory_mib),
                     "generation": g.generation or "",
                     "tensor_cores": ", ".join(g.tensor_core_precisions or ()), "sm_count": g.sm_count,
                     "boost_clock_mhz": g.boost_clock_mhz, "max_clock_mhz": g.max_clock_mhz,
                     "board_power_w": g.board_power_w, "tensor_rate_of_die": g.tensor_rate_of_die,
                     # the share of the boost clock tensor work runs at under the board's power limit (above 1:
                     # the board boosts beyond its rated boost clock, up to max_clock_mhz)
                     "tensor_clock_held": round(g.sustained_tensor_fraction(), 3)
                     if any(g.has_tensor_cores(q) for q in ("tf32", "fp16", "bf16")) else None,
                     "aliases": ", ".join(g.aliases), "source": g.source}
                    # by generation (oldest first, as GENERATIONS lists them), then name
                    for g in sorted(cat.gpus.values(), key=lambda g: (
                        GENERATIONS.index(g.generation) if g.generation in GENERATIONS else len(GENERATIONS), g.name))]
        elif kind == "efficiencies":
            derived = {"tf32_gemm_eff": "as tensor_gemm_eff", "attention_eff": "as tensor_gemm_eff",
                       "attention_v1_eff": f"{FLASH_V1_RELATIVE_SPEED:g} x attention_eff (FlashAttention-2 paper)"}
            # the tensor-core efficiencies price nothing on a generation whose GPUs have no tensor cores
            with_tc = {g.generation for g in cat.gpus.values() if g.tensor_core_precisions}
            tensor_only = ("tensor_gemm_eff", "tf32_gemm_eff", "attention_eff", "attention_v1_eff")
            rows = []
            for e in cat.compute_efficiency.values():
                row = {"generation": e.generation, **{k: getattr(e, k) for k in FITTABLE},
                       "tf32_gemm_eff": e.tf32_eff, "attention_eff": e.fused_attention_eff,
                       "attention_v1_eff": e.flash_v1_eff,
                       "source": " | ".join(f"{k}: {e.source.get(k, '') or derived.get(k, '')}"
                                            for k in (*FITTABLE, "attention_eff", "attention_v1_eff"))}
                if e.generation != "default" and e.generation not in with_tc:
                    row.update({k: None for k in tensor_only})
                rows.append(row)
        elif kind == "links":
            rows = [{"name": x.name, "kind": x.kind, "bandwidth_gb_s": x.bandwidth_gb_s, "rate_gbps": x.rate_gbps,
                     "latency_us": x.latency_us, "source": x.source} for x in cat.links.values()]
        elif kind == "servers":
            rows = [{"name": s.name, "gpu": s.gpu, "gpus_per_server": s.gpus_per_server, "pcie": s.pcie,
                     "gpus_per_pcie_root": s.gpus_per_pcie_root, "nvlink": s.nvlink or "none", "nic": s.nic,
                     "nics_per_server": s.nics_per_server, "storage_read_gb_s": s.storage_read_gb_s,
                     "source": s.source} for s in cat.servers.values()]
        else:
            rows = [{"name": s.name, "description": s.description,
                     "changes": ", ".join(
                         f"{k}={'+'.join(v) if isinstance(v, tuple) else v}"
                         for k, v in s.model_dump(exclude={"name", "description"}, exclude_defaults=True).items())}
                    for s in BUILTIN_SCENARIOS.values()]
        frame = pl.DataFrame(rows)
        if not sources and fmt == "table" and "source" in frame.columns:
            frame = frame.drop("source")
        captions = {
            "scenarios": None,
            "gpus": "dense peaks in TFLOP/s (tensor cores where the GPU has them for the precision, else its FP32 "
                    "rate); memory bandwidth in GB/s (1e9 bytes/s); memory_gb as sold (1e9 bytes), memory_mib as "
                    "the device reports it ('-': not recorded, memory_gb is used); boost_clock_mhz: the clock the "
                    "peaks assume; max_clock_mhz: the highest clock the board reports (nvidia-smi 'Max Clocks'; '-': "
                    "the boost clock); board_power_w: the datasheet's power limit in W; tensor_rate_of_die: the "
                    "share of its die's tensor rate the board runs FP32-accumulate MMAs at (0.5 on GeForce RTX); "
                    "tensor_clock_held: the "
                    "share of the boost clock (so of the tensor peaks) the model prices tensor-core work at under "
                    "that limit, above 1 where the board boosts beyond it (docs/model.md; 1 without board_power_w, '-' "
                    "for a GPU without tensor cores); "
                    "--sources shows each datasheet source",
            "efficiencies": "fractions of the datasheet peak (compute) or bandwidth (memory); *_us in microseconds; "
                            "'-' where a generation has no tensor cores (its GEMMs run at cuda_gemm_eff); "
                            "--sources shows each value's source",
        }
        emit(frame, fmt, title=f"ddlscope catalog: {kind}",
             caption=captions.get(kind, "bandwidths in GB/s (1e9 bytes/s) per direction; --sources shows each "
                                        "datasheet source"))



