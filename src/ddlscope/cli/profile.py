"""``ddlscope profile``: one training step of a PyTorch model -> op table and Workload totals."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import polars as pl
import typer

from ddlscope.cli.common import CatalogFiles, FormatOpt, check_output_file, err_console, user_catalog, user_errors
from ddlscope.report.console import FORMATS, emit, expected_one_of

ModelArg = Annotated[
    str | None,
    typer.Argument(help="zoo model name (see --list) or package.module:factory returning (model, example_batch)",
                   show_default=False),
]
ProfileBatchOpt = Annotated[int | None, typer.Option("--batch-size", "-b", help="samples per replica per step")]
SeqLenOpt = Annotated[
    int | None, typer.Option("--seq-len", help="sequence length (tokens, behaviours or audio samples)")]
ImageSizeOpt = Annotated[int | None, typer.Option("--image-size", help="image side in pixels")]
ProfilePrecisionOpt = Annotated[
    str, typer.Option("--precision", help="fp32, tf32, or fp16/bf16 automatic mixed precision")]
OptimizerOpt = Annotated[str, typer.Option("--optimizer", help="sgd (momentum 0.9), adam, adamw or bert_adam")]

TABLE_COLUMNS = ("calls", "flops", "total_bytes", "intensity_flops_per_byte", "roofline_s", "share")


def _check_suffix(path: Path, option: str = "") -> str:
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise ValueError(f"{option + ' ' if option else ''}{path}: expected a .parquet or .csv file name")
    return suffix


def write_table(frame: pl.DataFrame, path: Path) -> None:
    """Write ``frame`` as Parquet (``.parquet``) or CSV (``.csv``), creating the folder.

    Raises:
        ValueError: another suffix.
    """
    suffix = _check_suffix(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".parquet":
        frame.write_parquet(path)
    else:
        frame.with_columns(pl.selectors.enum().cast(pl.String)).write_csv(path)


def _zoo_table() -> pl.DataFrame:
    from ddlscope.profile.zoo import ZOO

    return pl.DataFrame([
        {"model": e.name, "kind": e.kind, "batch_size": e.batch_size, "seq_len": e.seq_len,
         "image_size": e.image_size, "description": e.description} for e in ZOO.values()
    ], schema_overrides={"seq_len": pl.Int64, "image_size": pl.Int64})


def _totals_lines(t: dict[str, Any]) -> dict[str, Any]:
    return {
        "FLOPs forward / backward / optimizer": f"{t['forward_flops']:.4g} / {t['backward_flops']:.4g} / "
                                                f"{t['optimizer_flops']:.4g}",
        "compute-bound FLOPs (matmul/conv class)": t["compute_bound_flops"],
        "memory-bound bytes (incl. optimizer)": t["memory_bound_bytes"],
        "parameters dense / sparse / frozen":
            f"{t['dense_params']:,} / {t['sparse_params']:,} / {t['frozen_params']:,}",
        "dense gradient bytes (tensors)": f"{t['dense_param_bytes']:.4g} ({t['num_gradient_tensors']})",
        "embedding tables bytes (tables)": f"{t['embedding_table_bytes']:.4g} ({t['embedding_tables']})",
        "sparse bytes touched per step": t["sparse_bytes_per_step"],
        "input bytes per step": t["input_bytes"],
        "activation bytes (end of forward) / peak": f"{t['activation_bytes']:.4g} / {t['peak_activation_bytes']:.4g}",
        "peak memory bytes (weights+grads+state+activations)": t["peak_memory_bytes"],
        "ideal step time on the reference GPU (roofline, s)": t["roofline_time_s"],
        "ops traced (views, host ops)": f"{t['ops']} ({t['view_ops']}, {t['host_ops']})",
        "unpriced ops (no FLOP formula; FLOPs 0, bytes counted)":
            ", ".join(f"{op} x{n}" for op, n in t.get("unpriced_ops", {}).items()) or "none",
    }


def register(app: typer.Typer) -> None:
    """Add ``profile`` to ``app``."""

    @app.command()
    @user_errors
    def profile(
        model: ModelArg = None,
        batch_size: ProfileBatchOpt = None,
        seq_len: SeqLenOpt = None,
        image_size: ImageSizeOpt = None,
        precision: ProfilePrecisionOpt = "fp32",
        optimizer: OptimizerOpt = "sgd",
        gpu: Annotated[str | None, typer.Option("--gpu", help="catalog GPU for the roofline columns "
                                                "(default V100-SXM2-16GB)")] = None,
        attention: Annotated[str, typer.Option("--attention", help="fused (GPU SDPA kernel) or math "
                                               "(materialised scores)")] = "fused",
        amp: Annotated[str, typer.Option("--amp", help="with --precision fp16/bf16: autocast (per-call casts) "
                                         "or o2 (apex O2: the model in 16 bit, FP32 master weights)")] = "autocast",
        dense_embeddings: Annotated[bool, typer.Option("--dense-embeddings", help="treat embedding tables as "
                                                       "dense (whole-table gradients)")] = False,
        by: Annotated[str, typer.Option("--by", help="group the table by op, module or phase")] = "op",
        top: Annotated[int, typer.Option("--top", help="rows of the table (0: all)")] = 15,
        ops_out: Annotated[Path | None, typer.Option("--ops-out", help="write the per-op table (.parquet or .csv)")]
        = None,
        params_out: Annotated[Path | None, typer.Option("--params-out", help="write the per-parameter table "
                                                        "(.parquet or .csv)")] = None,
        list_models: Annotated[bool, typer.Option("--list", help="list the zoo models and exit")] = False,
        catalog: CatalogFiles = None,
        fmt: FormatOpt = "table",
    ) -> None:
        """Trace one training step (forward, backward, optimizer) on the meta device.

        Prints the ops grouped (by op by default) with FLOPs, bytes, arithmetic intensity and the
        ideal (roofline) time on a reference GPU, and the step's totals; --format json prints the
        totals and the Workload (readable by predict --workload-file).
        """
        # every option is checked before the model is traced
        expected_one_of(fmt, FORMATS)
        expected_one_of(by, ("op", "module", "phase"), "--by")
        if top < 0:
            raise ValueError(f"--top: expected a number of rows >= 0 (0: all), got {top}")
        for option, path in (("--ops-out", ops_out), ("--params-out", params_out)):
            if path is not None:
                _check_suffix(path, option)
            check_output_file(path, option)
        if list_models or model is None:
            if model is None and not list_models:
                raise ValueError("MODEL: give a zoo model name or package.module:factory (--list shows the zoo)")
            emit(_zoo_table(), fmt, title="ddlscope model zoo (defaults)")
            return
        from ddlscope.profile import profile_model

        if amp != "autocast" and precision not in ("fp16", "bf16"):
            err_console.print(f"note: --amp {amp} applies to --precision fp16/bf16 only; ignored at {precision}")
        result = profile_model(
            model, batch_size=batch_size, seq_len=seq_len, image_size=image_size, precision=precision,
            optimizer=optimizer, gpu=gpu, attention=attention, amp=amp,
            embedding_gradients="dense" if dense_embeddings else "sparse",
            catalog=user_catalog(catalog) if catalog else None,
        )
        if ops_out is not None:
            write_table(result.ops, ops_out)
        if params_out is not None:
            write_table(result.params, params_out)
        summary = result.summary(by)  # type: ignore[arg-type]
        tables = result.embedding_tables
        if fmt == "table":
            s = result.settings
            sizes = ", ".join(f"{k.replace('_', ' ')} {s[k]}" for k in ("batch_size", "seq_len", "image_size")
                              if k in s)
            shown = summary.head(top) if top > 0 else summary
            emit(shown.select(*[c for c in summary.columns if c not in TABLE_COLUMNS], *TABLE_COLUMNS), "table",
                 title=f"{result.model} | {sizes} | {precision}"
                       + (" (apex O2)" if s.get("amp") == "o2" else "")
                       + f", {optimizer}" + (", attention math" if s.get("attention") == "math" else "")
                       + f" | roofline on {s['gpu']}",
                 caption=f"{'top ' + str(top) + ' of ' + str(summary.height) if 0 < top < summary.height else 'all'}"
                 f" groups by ideal time; share = part of the step's roofline time",
                 extra=_totals_lines(result.totals))
            if tables.height:
                emit(tables.select("name", "kind", "rows", "row_bytes", "lookups_per_step", "position_lookups_per_step",
                                   "rows_touched_per_step", "touched_bytes_per_step"), "table",
                     title="embedding tables (rows touched: position look-ups distinct, the rest uniform draws)")
        else:
            emit(summary, fmt, extra={
                "totals": result.totals,
                "workload": result.workload.model_dump(),
                "embedding_tables": tables.with_columns(pl.selectors.enum().cast(pl.String)).to_dicts(),
            } if fmt == "json" else None)
