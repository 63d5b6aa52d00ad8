"""``ddlscope plan``: the best training plans of a decoder LLM on N GPUs (``ddlscope.model.plan``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.markup import escape

from ddlscope.cli.common import (
    CatalogFiles,
    FlashAttentionVersionOpt,
    FormatOpt,
    GpuOpt,
    NicOpt,
    err_console,
    user_catalog,
    user_errors,
)
from ddlscope.model.plan import search
from ddlscope.profile.llm import BUILTIN_CONFIGS, DecoderConfig, mpt_configs
from ddlscope.report.console import FORMATS, emit, expected_one_of
from ddlscope.shared_data import find_shared_data

PLAN_COLUMNS = ("architecture", "sharding", "tp", "cp", "pp", "virtual_stages", "micro_batch", "microbatches",
                "recompute", "step_s", "tokens_per_s_per_gpu", "mfu", "bubble_s", "exposed_comm_s", "bottleneck",
                "fits_gpu_memory", "loses_by")


def load_config(model: str, seq_len: int) -> DecoderConfig:
    """``model``: a Hugging Face ``config.json`` path, a built-in config name
    (:data:`ddlscope.profile.llm.BUILTIN_CONFIGS`: ``mixtral-8x7b``), or ``mpt-<size>`` (``125m``
    ... ``70b``) from the shared data's llm-foundry shapes.

    Raises:
        ValueError: an unknown name, a config the decoder reader cannot use, no shared data.
        FileNotFoundError: a missing file.
    """
    path = Path(model)
    if path.suffix == ".json" or path.exists():
        try:
            config = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        return DecoderConfig.from_hf(config, seq_len=seq_len, name=path.stem)
    if model.lower() in BUILTIN_CONFIGS:
        return DecoderConfig.from_hf(BUILTIN_CONFIGS[model.lower()], seq_len=seq_len, name=model.lower())
    if model.lower().startswith("mpt-"):
        data = find_shared_data()
        if data is None:
            raise ValueError("mpt-<size> reads ../shared/data/llm_foundry_mpt/mpt_model_shapes.csv, not found")
        shapes = mpt_configs(data / "llm_foundry_mpt" / "mpt_model_shapes.csv", seq_len=seq_len)
        size = model.lower()[4:]
        if size not in shapes:
            raise ValueError(f"model: unknown MPT size {size!r}; expected one of {', '.join(shapes)}")
        return shapes[size]
    raise ValueError(f"model: expected a Hugging Face config.json path or mpt-<size> (or a built-in config: "
                     f"{', '.join(BUILTIN_CONFIGS)}), got {model!r}")


def register(app: typer.Typer) -> None:
    """Add ``plan`` to ``app``."""

    @app.command()
    @user_errors
    def plan(
        model: Annotated[str, typer.Argument(help="a Hugging Face config.json, mixtral-8x7b, llama-2-70b, or "
                                                  "mpt-125m ... mpt-70b")],
        gpus: Annotated[int, typer.Option("--gpus", "-n", min=1, help="GPUs of the job: 2 or more, whole servers "
                                          "(or part of one server)")] = 8,
        global_batch: Annotated[int, typer.Option("--global-batch", min=1, help="sequences per optimizer step")] = 1024,
        seq_len: Annotated[int, typer.Option("--seq-len", min=1, help="tokens per sequence")] = 2048,
        system: Annotated[str | None, typer.Option("--system", "-s", help="server type from the catalog "
                                                   "(default dgx-a100)")] = None,
        gpu: GpuOpt = None,
        nic: NicOpt = None,
        catalog: CatalogFiles = None,
        top: Annotated[int, typer.Option("--top", min=1, help="plans to print")] = 10,
        flash_attention_version: FlashAttentionVersionOpt = 2,
        fmt: FormatOpt = "table",
    ) -> None:
        """Search every valid plan of a decoder LLM on N GPUs and print the best.

        Plans: fsdp with each sharding (zero1, zero2, zero3, hybrid) and 3d (tensor x context x pipeline x
        data parallel, 1F1B or interleaved; expert parallel over the data-parallel GPUs for a mixture of
        experts), each micro-batch (1-16) and activation recomputation (none,
        selective, full), all evaluated by the step-time model in one pass. Ranked by tokens/s among the
        plans that fit the GPU's memory; `loses_by` names the component that costs each worse plan the
        most time per sequence against the best one.
        Example: `ddlscope plan mpt-70b --gpus 1024 --global-batch 2048 --system dgx-a100`.
        """
        expected_one_of(fmt, FORMATS)  # before the search, not after it
        cat = user_catalog(catalog)
        cfg = load_config(model, seq_len)
        if cfg.flash_attention:
            cfg = cfg.model_copy(update={"flash_attention_version": flash_attention_version})
        sysm = cat.system(system or "dgx-a100", gpu=gpu, nic=nic)
        ranked, t = search(cfg, gpus, sysm, global_batch, catalog=cat)
        fit = int(ranked["fits_gpu_memory"].fill_null(True).sum())
        cols = PLAN_COLUMNS if not cfg.moe else (*PLAN_COLUMNS[:5], "ep", *PLAN_COLUMNS[5:])
        shown = ranked.head(top).select(cols).with_columns(
            pl.col("architecture").cast(pl.String), pl.col("sharding").cast(pl.String))
        size = f"{cfg.num_params / 1e9:.1f} B parameters" + (
            f", {cfg.active_params / 1e9:.1f} B active, {cfg.num_experts} experts, top-{cfg.experts_per_token}"
            if cfg.moe else "")
        job = (f"{cfg.name} ({size}), {gpus} x {sysm.gpu.name} on {sysm.name}, global batch {global_batch} x "
               f"{seq_len} tokens")
        extra: dict[str, object] = {"plans": int(t["plans"]), "plans_fitting_gpu_memory": fit}
        if fit:
            title = f"best plans: {job}"
        else:
            title = f"no plan fits the GPU memory: {job}; the plans ranked by tokens/s as if they fit"
            why = no_fit_reason(ranked)
            extra["no_plan_fits_gpu_memory"] = why
            if fmt != "table":  # the table's title and extra lines say it; csv has no room for it
                err_console.print(f"[yellow]warning:[/yellow] no plan fits the GPU memory: {escape(why)}",
                                  emoji=False)
        extra.update({"search_s": round(t["build_s"] + t["evaluate_s"], 3),
                      "plans_per_s_evaluated": round(t["plans_per_s"])})
        emit(shown, fmt, title=title, extra=extra)


def plan_words(row: dict) -> str:
    """One plan in words: ``fsdp zero3, micro-batch 1, recompute full`` or ``3d tp 8, cp 1, pp 8
    (2 virtual stages), ep 1, micro-batch 1 x 64 micro-batches, recompute full``."""
    tail = f"micro-batch {row['micro_batch']}"
    if str(row["architecture"]) == "fsdp":
        return f"fsdp {row['sharding']}, {tail}, recompute {row['recompute']}"
    v = row.get("virtual_stages") or 1
    stages = f" ({v} virtual stages)" if v > 1 else ""
    return (f"3d tp {row['tp']}, cp {row['cp']}, pp {row['pp']}{stages}, ep {row.get('ep') or 1}, {tail} x "
            f"{row['microbatches']} micro-batches, recompute {row['recompute']}")


def no_fit_reason(ranked: pl.DataFrame) -> str:
    """Why no plan of ``ranked`` (:func:`ddlscope.model.plan.search`, none fitting) runs: the least
    memory a plan needs per GPU (``gpu_memory_needed_bytes``, GiB = 2**30 bytes) against the GPU's,
    and that plan (:func:`plan_words`)."""
    least = ranked.sort("gpu_memory_needed_bytes", nulls_last=True).row(0, named=True)
    return (f"the plan needing the least memory needs {least['gpu_memory_needed_bytes'] / 2**30:.1f} GiB per GPU "
            f"({plan_words(least)}), the {least['gpu']} has {least['gpu_memory_bytes'] / 2**30:.1f} GiB; "
            "more GPUs or a GPU with more memory would be needed")
