"""``ddlscope predict`` and ``ddlscope whatif``: the step-time model on one job."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import polars as pl
import typer

from ddlscope.cli.common import (
    ArchOpt,
    CatalogFiles,
    FlashAttentionVersionOpt,
    FormatOpt,
    GpuOpt,
    GpusPerWorkerOpt,
    NicOpt,
    NvlinkOpt,
    OverlapOpt,
    ParallelOpt,
    PsOpt,
    ServersOpt,
    SystemFile,
    SystemName,
    WorkersOpt,
    err_console,
    parse_parallel,
    parse_scenarios,
    resolve_architecture,
    resolve_system,
    user_errors,
)
from ddlscope.model.api import predict as predict_job
from ddlscope.model.api import predict_whatif
from ddlscope.model.step_time import COMPONENTS
from ddlscope.report.console import FORMATS, emit, expected_one_of
from ddlscope.specs.examples import example_architecture, example_workload
from ddlscope.specs.scenario import BUILTIN_SCENARIOS
from ddlscope.specs.workload import Workload, load_workload

WorkloadFile = Annotated[
    Path | None,
    typer.Option("--workload-file", help="workload fields as TOML/JSON (default: the built-in ResNet-50 example)"),
]
BatchOpt = Annotated[int | None, typer.Option("--batch-size", "-b", help="samples per GPU per step")]
PrecisionOpt = Annotated[
    str | None,
    typer.Option("--precision", help="fp32, tf32, fp16 or bf16 (with --model: profiled at it; else the workload's "
                 "memory-bound bytes scale by bytes per element, as in the mixed-precision scenario)"),
]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="take the workload from `ddlscope profile` of a zoo model or "
                 "package.module:factory, or from a decoder LLM's shape (a Hugging Face config.json, mixtral-8x7b, "
                 "llama-2-70b, mpt-<size>; bf16, sequence --seq-len, default 2048) (instead of --workload-file)"),
]
SeqLenOpt = Annotated[int | None, typer.Option("--seq-len", help="with --model: sequence length")]
ImageSizeOpt = Annotated[int | None, typer.Option("--image-size", help="with --model: image side in pixels")]
OptimizerOpt = Annotated[str | None, typer.Option("--optimizer", help="with --model: sgd, adam, adamw or bert_adam")]

_LINK_OF = {"pcie": "pcie_bytes", "nvlink": "nvlink_bytes", "network": "network_bytes"}


def _workload(workload_file: Path | None, batch_size: int | None, precision: str | None, model: str | None = None,
              seq_len: int | None = None, image_size: int | None = None, optimizer: str | None = None) -> Workload:
    return _workload_and_ops(workload_file, batch_size, precision, model, seq_len, image_size, optimizer)[0]


def _workload_and_ops(workload_file: Path | None, batch_size: int | None, precision: str | None,
                      model: str | None = None, seq_len: int | None = None, image_size: int | None = None,
                      optimizer: str | None = None,
                      flash_attention_version: int | None = None) -> tuple[Workload, pl.DataFrame | None]:
    """The workload and, with ``--model``, its op table (for op-level pricing; ``None`` otherwise).

    ``flash_attention_version`` (``--flash-attention-version``, as ``ddlscope plan``'s): the
    flash-attn release of a decoder LLM config that uses flash attention (1 or 2; ``None``: the
    config's own, 2); its attention kernels are then priced at the catalog's ``attention_v1_eff``
    or ``attention_eff``. A config without flash attention ignores it, as ``plan`` does.

    Raises:
        ValueError: conflicting or misplaced options (``--flash-attention-version`` without a
            decoder LLM ``--model``), as each message says.
    """
    if flash_attention_version is not None and (model is None or not _is_decoder_config(model)):
        raise ValueError("--flash-attention-version: only with --model of a decoder LLM (a Hugging Face config.json, "
                         "mixtral-8x7b, mpt-<size>)")
    if model is not None:
        if workload_file is not None:
            raise ValueError("--model, --workload-file: give one of them")
        if _is_decoder_config(model):
            from ddlscope.cli.plan import load_config
            from ddlscope.profile.llm import decoder_workload

            if image_size is not None or optimizer is not None:
                raise ValueError("--image-size, --optimizer: not for a decoder LLM config (Adam, sequences)")
            for flag, v in (("--seq-len", seq_len), ("--batch-size", batch_size)):
                if v is not None and v < 1:
                    raise ValueError(f"{flag}: expected a positive integer, got {v}")
            cfg = load_config(model, 2048 if seq_len is None else seq_len)
            if flash_attention_version is not None and cfg.flash_attention:
                cfg = cfg.model_copy(update={"flash_attention_version": flash_attention_version})
            return decoder_workload(cfg, 1 if batch_size is None else batch_size, precision=precision or "bf16")
        from ddlscope.profile import profile_model

        r = profile_model(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size,
                          precision=precision or "fp32", optimizer=optimizer or "sgd")
        return r.workload, r.ops
    given = [flag for flag, v in (("--seq-len", seq_len), ("--image-size", image_size), ("--optimizer", optimizer))
             if v is not None]
    if given:
        raise ValueError(f"{', '.join(given)}: only with --model (they are profiling options)")
    w = load_workload(workload_file) if workload_file else example_workload()
    scaled = w.at(batch_size=batch_size, precision=precision)
    if w.peak_memory_bytes is not None and scaled.peak_memory_bytes is None:
        # Workload.at cannot rescale the peak (activations scale with the batch, weights do not)
        err_console.print(
            f"[yellow]warning:[/yellow] the GPU memory fit is not checked: the workload's peak memory "
            f"({w.peak_memory_bytes / 1e9:.3g} GB at batch size {w.batch_size}) is unknown at -b {batch_size}; "
            f"use --model NAME -b {batch_size} to re-profile it at that size", emoji=False)
    return scaled, None


def _is_decoder_config(model: str) -> bool:
    """``--model`` names a decoder LLM shape (:func:`ddlscope.cli.plan.load_config`): a ``.json``
    file, a built-in config name or ``mpt-<size>``; anything else is profiled."""
    from ddlscope.profile.llm import BUILTIN_CONFIGS

    return model.endswith(".json") or model.lower() in BUILTIN_CONFIGS or model.lower().startswith("mpt-")


def _warn_memory(out: pl.DataFrame) -> None:
    """A warning on stderr for every row whose replica does not fit the GPU's memory."""
    from ddlscope.model.arch_costs import costed_kinds

    sharded = set(costed_kinds())  # fsdp, 3d: the per-GPU need is the sharded state, not the whole replica
    unfit = out.filter(pl.col("fits_gpu_memory") == False)  # noqa: E712 (null = unknown stays quiet)
    for r in unfit.iter_rows(named=True):
        where = f" under {r['scenario']}" if r.get("scenario") not in (None, "baseline") else ""
        per_gpu = r.get("gpu_memory_needed_bytes")
        # need and capacity both in GiB (2**30 bytes): the capacity is what the device reports (nvidia-smi's MiB)
        need = ((f"the {per_gpu / 2**30:.1f} GiB per GPU of model state and activations (as this placement shards "
                 "them)" if per_gpu is not None else "its GPUs' share of the model state and activations (as this "
                 "placement splits them)")
                if str(r.get("architecture")) in sharded else f"a replica's {r['peak_memory_bytes'] / 2**30:.1f} GiB")
        err_console.print(
            f"[yellow]warning:[/yellow] {need}{where} exceeds the {r['gpu']}'s "
            f"{r['gpu_memory_bytes'] / 2**30:.1f} GiB: "
            "this placement does not fit in GPU memory (the times assume it did)")


def _warn_precision(out: pl.DataFrame, cat) -> None:
    """A warning on stderr for every (GPU, precision) of ``out`` whose GEMMs have no tensor cores at
    that precision (bf16 on Volta or Turing, tf32 before Ampere, any 16-bit type on Pascal and
    older): the catalog prices them at the FP32 peak (its convention for a GPU without the unit), as
    such a GPU runs them."""
    for gpu, precision in out.select("gpu", pl.col("precision").cast(pl.String)).unique().iter_rows():
        if precision == "fp32":
            continue
        spec = cat.gpu(gpu)
        if not spec.has_tensor_cores(precision):
            other = [p for p in ("fp16", "bf16", "tf32") if p != precision and spec.has_tensor_cores(p)]
            hint = f"; its tensor cores take {', '.join(other)}" if other else ""
            err_console.print(
                f"[yellow]warning:[/yellow] the {gpu} has no {precision} tensor cores: {precision} GEMMs are priced "
                f"at its FP32 rate ({getattr(spec.peak_tflops, precision):.1f} TFLOP/s){hint}", emoji=False)


def _warn_pipeline(arch) -> None:
    """A warning on stderr when a pipeline-parallel placement has fewer micro-batches than stages
    (``microbatches * virtual_stages < pp``): the 1F1B pipeline never reaches its steady state and
    its bubble, ``(pp - 1) / (M v)`` of the ideal step (Narayanan et al., SC 2021, sec. 2.2,
    :func:`ddlscope.model.pipeline.bubble_fraction`), is larger than the work itself; the prediction
    prices it, but such a placement is rarely what was meant."""
    pp, m, v = int(getattr(arch, "pp", 1) or 1), int(getattr(arch, "microbatches", 1) or 1), int(
        getattr(arch, "virtual_stages", 1) or 1)
    if pp > 1 and m * v < pp:
        from ddlscope.model.pipeline import bubble_fraction

        err_console.print(
            f"[yellow]warning:[/yellow] pp={pp} with {m} micro-batch(es) x {v} virtual stage(s): the pipeline "
            f"bubble is {bubble_fraction(pp, m, v):.2f} x the ideal step (each stage idles at least as long as "
            f"it works); the bubble shrinks as microbatches grow past pp (Narayanan et al., SC 2021: M >> pp, "
            f"e.g. --parallel ...,microbatches={4 * pp})", emoji=False)


def _warn_layer_shape(arch, workload) -> None:
    """A warning on stderr when a model-parallel placement (``3d`` with tp, cp or pp above 1) prices a
    workload without its layer shape (``num_layers``, ``layer_activation_bytes``: a decoder LLM
    config's workload has them; a profiled zoo model and the built-in example do not): the tensor-,
    context- and pipeline-parallel traffic is then priced as 0 bytes (:mod:`ddlscope.model.pipeline`)."""
    split = [f"{k}={v}" for k in ("tp", "cp", "pp") if (v := int(getattr(arch, k, 1) or 1)) > 1]
    missing = [k for k in ("num_layers", "layer_activation_bytes") if getattr(workload, k, None) is None]
    if arch.kind == "3d" and split and missing:
        err_console.print(
            f"[yellow]warning:[/yellow] {', '.join(split)} on a workload without {' and '.join(missing)}: "
            "its tensor/context/pipeline-parallel traffic is priced as 0 bytes; give --model a decoder LLM config "
            "(mpt-7b, llama-2-70b, a Hugging Face config.json) or set them in the --workload-file", emoji=False)


def _component_table(row: dict) -> pl.DataFrame:
    """One row per component: its time, share of the step, bytes per step (links), and for the links
    the communication exposed (on the step's critical path) and hidden behind computation, plus the
    wait for the slowest rank (``sync_wait``, scheduled overlap) and, where the schedule exposes
    more than the links' time, the per-collective launch latency (``collective_launch``)."""
    # the launch latency beyond the links' time, where the schedule exposes some
    names = [*COMPONENTS, "sync_wait", *(["collective_launch"] if (row.get("launch_exposed_s") or 0) > 0 else [])]
    apart = {"sync_wait": "sync_wait_s", "collective_launch": "launch_exposed_s"}

    def link(c: str, suffix: str) -> float | None:
        return row.get(f"{c}_{suffix}") if c in _LINK_OF else None
    return pl.DataFrame({
        "component": names,
        "time_s": [row[apart.get(c, f"{c}_s")] for c in names],
        # links: their exposed time's share (the model's share_<link> also carries the wait and the launch
        # latency, shown apart here)
        "share": [row[f"{c}_exposed_s"] / row["step_s"] if c in _LINK_OF else
                  row[apart[c]] / row["step_s"] if c in apart else row[f"share_{c}"] for c in names],
        "bytes_per_step": [row.get(_LINK_OF.get(c, "")) for c in names],
        "exposed_s": [link(c, "exposed_s") for c in names],
        "hidden_s": [link(c, "hidden_s") for c in names],
    }, schema_overrides={"exposed_s": pl.Float64, "hidden_s": pl.Float64})


def _overlap_line(overlap: str, row: dict) -> str:
    """``predict``'s ``overlap`` line: a fraction as given, else what the scheduled overlap does for
    the row's architecture (:func:`ddlscope.model.arch_costs.overlap_note`: FSDP's prefetch, 3d's
    nothing hidden; the DDP/PS bucket schedule for the others) and the communication it hides."""
    from ddlscope.model.arch_costs import overlap_note

    if row["overlap_fraction"] is not None:
        return f"{overlap} (fraction {row['overlap_fraction']})"
    note = overlap_note(str(row["architecture"]), row.get("num_gradient_tensors")) or "buckets behind the backward"
    return f"{overlap} ({note}; hidden {row['hidden_comm_s']:.4g} s of {row['comm_s']:.4g} s communication)"


def _compute_provenance(row: dict, system) -> str:
    """Which compute model priced the row and where its efficiencies come from (issue 14)."""
    src = row.get("compute_efficiency_source")
    if src:
        return f"op by op on {row['gpu']}; efficiencies: {src}"
    e = system.efficiency
    return (f"from totals (no op table: give --model to price op by op); eff_compute {e.compute:g}, "
            f"eff_memory {e.memory:g} from {system.name!r} (built-in assumptions unless a system file or "
            "`ddlscope calibrate` set them)")


def register(app: typer.Typer) -> None:
    """Add ``predict`` and ``whatif`` to ``app``."""

    @app.command()
    @user_errors
    def predict(
        workload_file: WorkloadFile = None,
        model: ModelOpt = None,
        batch_size: BatchOpt = None,
        precision: PrecisionOpt = None,
        seq_len: SeqLenOpt = None,
        image_size: ImageSizeOpt = None,
        optimizer: OptimizerOpt = None,
        flash_attention_version: FlashAttentionVersionOpt = None,
        architecture: ArchOpt = None,
        workers: WorkersOpt = None,
        gpus_per_worker: GpusPerWorkerOpt = None,
        ps: PsOpt = None,
        servers: ServersOpt = None,
        parallel: ParallelOpt = None,
        system: SystemName = None,
        system_file: SystemFile = None,
        gpu: GpuOpt = None,
        nic: NicOpt = None,
        nvlink: NvlinkOpt = None,
        catalog: CatalogFiles = None,
        overlap: OverlapOpt = "scheduled",
        fmt: FormatOpt = "table",
    ) -> None:
        """Predict where one training step's time goes for one job.

        Components: data I/O, compute-bound, memory-bound, and weight/gradient communication per link class (PCIe,
        NVLink, network); the step time, samples/s and the bottleneck. Without options: the built-in ResNet-50
        example as PS/Worker (8 workers, 2 PS) on the PAI study's 8 x V100 NVLink server with 25 Gb/s Ethernet.
        """
        parse_parallel(parallel)  # its errors before the (possibly long) profiling
        w, ops = _workload_and_ops(workload_file, batch_size, precision, model, seq_len, image_size, optimizer,
                                   flash_attention_version)
        arch = resolve_architecture(architecture, workers, gpus_per_worker, ps, servers, example_architecture(),
                                    parallel)
        sysm, cat = resolve_system(system, system_file, gpu, nic, nvlink, catalog)
        expected_one_of(fmt, FORMATS)
        out = predict_job(w, arch, sysm, overlap=overlap, ops=ops, catalog=cat)
        row = out.row(0, named=True)
        _warn_memory(out)
        _warn_precision(out, cat)
        _warn_pipeline(arch)
        _warn_layer_shape(arch, w)
        if fmt == "table":
            title = (f"{w.name} | {arch.kind}: {arch.num_gpus} GPU(s) on {row['num_servers']} server(s)"
                     f"{f', {arch.num_ps} PS' if arch.num_ps else ''} | {sysm.name}")
            emit(_component_table(row), "table", title=title, extra={
                "step_s": row["step_s"],
                "samples_per_s (all GPUs)": row["samples_per_s"],
                "exposed communication share": row["share_comm"],
                "bottleneck": f"{row['bottleneck']} (link: {row['bottleneck_link']})",
                "overlap": _overlap_line(overlap, row),
                "host (fixed per step)": row["host_s"],
                "compute priced": _compute_provenance(row, sysm),
            })
        else:
            emit(out, fmt)

    @app.command()
    @user_errors
    def whatif(
        scenario: Annotated[
            list[str] | None,
            typer.Option("--scenario", help="built-in scenario name or scenario file (repeatable; default: "
                         f"all built-ins: {', '.join(BUILTIN_SCENARIOS)}), or inline 'name:key=value,...'"),
        ] = None,
        workload_file: WorkloadFile = None,
        model: ModelOpt = None,
        batch_size: BatchOpt = None,
        precision: PrecisionOpt = None,
        seq_len: SeqLenOpt = None,
        image_size: ImageSizeOpt = None,
        optimizer: OptimizerOpt = None,
        flash_attention_version: FlashAttentionVersionOpt = None,
        architecture: ArchOpt = None,
        workers: WorkersOpt = None,
        gpus_per_worker: GpusPerWorkerOpt = None,
        ps: PsOpt = None,
        servers: ServersOpt = None,
        parallel: ParallelOpt = None,
        system: SystemName = None,
        system_file: SystemFile = None,
        gpu: GpuOpt = None,
        nic: NicOpt = None,
        nvlink: NvlinkOpt = None,
        catalog: CatalogFiles = None,
        overlap: OverlapOpt = "scheduled",
        fmt: FormatOpt = "table",
    ) -> None:
        """Run one job under what-if scenarios and print each with its speedup over the baseline.

        Without options: the built-in example job (ResNet-50, PS/Worker, 8 workers, 2 PS shards on the PAI study's
        8 x V100 NVLink server with 25 Gb/s Ethernet) under every built-in scenario.
        """
        parse_parallel(parallel)  # its errors before the (possibly long) profiling
        w, ops = _workload_and_ops(workload_file, batch_size, precision, model, seq_len, image_size, optimizer,
                                   flash_attention_version)
        arch = resolve_architecture(architecture, workers, gpus_per_worker, ps, servers, example_architecture(),
                                    parallel)
        sysm, cat = resolve_system(system, system_file, gpu, nic, nvlink, catalog)
        scenarios = parse_scenarios(scenario, cat)
        expected_one_of(fmt, FORMATS)
        op_tables = None
        if ops is not None:  # every scenario priced op by op: its precisions profiled too (tf32 shares fp32's)
            op_tables = {w.precision: ops}
            for p in sorted({s.precision for s in scenarios if s.precision} - {w.precision}):
                if {p, w.precision} != {"fp32", "tf32"}:
                    op_tables[p] = _workload_and_ops(None, batch_size, p, model, seq_len, image_size, optimizer,
                                                     flash_attention_version)[1]
        out = predict_whatif(w, arch, sysm, scenarios, overlap=overlap, ops=op_tables, catalog=cat)
        _warn_memory(out)
        _warn_precision(out, cat)
        _warn_pipeline(arch)
        _warn_layer_shape(arch, w)
        if fmt == "table":
            table = out.select(
                "scenario",
                pl.col("scenario_applied").alias("applied"),
                "architecture",
                "step_s",
                "speedup",
                (pl.col("compute_bound_s") + pl.col("memory_bound_s")).alias("compute_s"),
                "data_io_s",
                "exposed_comm_s",
                "share_comm",
                "bottleneck",
                "bottleneck_link",
                pl.col("fits_gpu_memory").alias("fits_memory"),
            )
            emit(table, "table",
                 title=f"What-if: {w.name} | {arch.kind}, {arch.num_gpus} GPU(s) | {sysm.name}",
                 caption="times in seconds per step; compute_s = compute-bound + memory-bound; "
                 "speedup = baseline step_s / scenario step_s; compute "
                 + ("priced op by op on each scenario's GPU and precision" if ops is not None
                    else "from the workload's totals (give --model to price op by op)")
                 + "; --format json for every column")
        else:
            emit(out, fmt)

