"""``ddlscope ps-train``: a real, instrumented parameter-server training that writes RPC logs."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ddlscope.cli.common import FormatOpt, err_console, user_errors
from ddlscope.pstrain.config import FailureInjection, NetemConfig, RunConfig
from ddlscope.pstrain.launcher import Progress as RunProgress
from ddlscope.pstrain.launcher import (
    PsTrainFailedError,
    PsTrainInterruptedError,
    RunResult,
    check_output_folder,
    run,
)
from ddlscope.pstrain.netem import NetworkEmulationError
from ddlscope.pstrain.summary import per_op_summary
from ddlscope.report.console import FORMATS, emit, expected_one_of

WIDE_PROGRESS_COLUMNS = 100
"""From this terminal width on, the progress line also shows the RPC count."""

_OPTION_OF_FIELD = {"stall_timeout_s": "--stall-timeout", "enabled": "--netns"}


def _option_of(loc: tuple[Any, ...]) -> str:
    """The command-line option behind a RunConfig/NetemConfig field location."""
    if not loc:
        return ""
    head = str(loc[-1] if loc[0] == "netem" else loc[0])
    if head == "inject_failure":
        return "--inject-failure"
    return _OPTION_OF_FIELD.get(head, "--" + head.replace("_", "-"))


def describe_config_error(exc: ValidationError) -> str:
    """``--option: what was expected (got value)`` for each error of a RunConfig/NetemConfig, joined by
    ``; `` (our own validators' messages already name their options)."""
    parts = []
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "value_error" or not err["loc"]:
            parts.append(msg)
            continue
        inp = err.get("input")
        got = f" (got {inp!r})" if isinstance(inp, str | int | float) and len(repr(inp)) <= 60 else ""
        parts.append(f"{_option_of(err['loc'])}: {msg}{got}")
    return "; ".join(parts)


class _ProgressView:
    """A rich progress bar on stderr: iterations (all workers), loss, RPCs/s; it fits the terminal
    (from 80 columns on, the bar takes what the figures leave)."""

    def __init__(self, total: int, quiet: bool, console: Console | None = None):
        self.console = console or err_console
        self.bar = None
        if not quiet:
            figures = "it  loss {task.fields[loss]}  {task.fields[rate]} RPCs/s"
            if self.console.width >= WIDE_PROGRESS_COLUMNS:
                figures += "  {task.fields[rpcs]} RPCs"
            self.bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(bar_width=None), MofNCompleteColumn(),
                TextColumn(figures), TimeElapsedColumn(), console=self.console, transient=False, expand=True,
            )
            self.task = self.bar.add_task("starting", total=total, loss="-", rate="-", rpcs=0)

    def __enter__(self) -> _ProgressView:
        return self

    def __exit__(self, *exc) -> None:
        if self.bar and self.bar.live.is_started:
            self.bar.stop()

    def update(self, p: RunProgress) -> None:
        if not self.bar:
            return
        if not self.bar.live.is_started:
            if p.phase == "preparing data":
                return  # shown from the start of the processes on: bad input gets its error line alone
            self.bar.start()
        self.bar.update(self.task, completed=p.iterations_done, description=p.phase,
                        loss="-" if p.loss is None else f"{p.loss:.3f}",
                        rate=f"{p.rpcs_per_s:,.0f}" if p.elapsed_s else "-", rpcs=f"{p.rpcs:,}")

    def warn(self, text: str) -> None:
        self.console.print(f"[yellow]warning:[/yellow] {escape(text)}", emoji=False)


def netem_text(info: dict) -> str:
    """The run summary's ``netem`` entry (``{"applied": {...} | None, "skipped": reason}``, see
    :attr:`ddlscope.pstrain.netem.EmulatedNetwork.applied`) as one readable line, e.g. ``netem on
    5 network namespaces: 100 Mbit/s, 10 ms one-way delay, 0.5% loss``."""
    if info.get("skipped"):
        return f"not applied: {info['skipped']}"
    applied = info.get("applied")
    if not applied:
        return "off"
    shaping = [text for key, text in (("bandwidth_mbit", "{:g} Mbit/s"), ("delay_ms", "{:g} ms one-way delay"),
                                      ("loss_pct", "{:g}% loss")) if applied.get(key) is not None
               for text in [text.format(applied[key])]]
    where = f"{applied.get('namespaces', 0)} network namespaces"
    qdisc = applied.get("qdisc") or "none"
    if qdisc == "none" or not shaping:
        return f"{where}, no shaping"
    return f"{qdisc} on {where}: {', '.join(shaping)}"


def _print_result(result: RunResult, fmt: str) -> None:
    s = result.summary
    table = per_op_summary(result.log)
    extra = {
        "workers x servers": f"{s['config']['workers']} x {s['config']['servers']} ({s['config']['mode']}, "
                             f"{s['config']['connections']} connections"
                             + (f", at most {s['config']['max_connections']}" if s['config']['max_connections'] else "")
                             + ")",
        "model": f"{s['model']['kind']} on {s['data']['path']}",
        "iterations per worker": s["config"]["iterations"],
        "rpcs logged": s["rpcs"],
        "train wall time (s)": s["train_wall_s"],
        "rpcs_per_s": s["rpcs_per_s"],
        "loss (first -> last iterations)": f"{s['loss_first']:.4f} -> {s['loss_last']:.4f}"
        if s["loss_first"] is not None else "-",
        "network emulation": netem_text(s["netem"]),
        "output": str(result.out),
    }
    if s["rpcs_excluded"]:
        extra["rpcs not logged (by reason)"] = s["rpcs_excluded"]
    if fmt == "json":
        emit(table, "json", extra={"summary": s})
    else:
        emit(table, fmt, title="ps-train: RPCs per operation (client-observed latency)", extra=extra)


def register(app: typer.Typer) -> None:
    """Add ``ps-train`` to ``app``."""

    @app.command("ps-train")
    @user_errors
    def ps_train(
        model: Annotated[str, typer.Option("--model", "-m", help="word (text, default) or ctr "
                                           "(Criteo/Avazu)")] = "word",
        data: Annotated[Path | None, typer.Option("--data", help="input file (default: text/tinyshakespeare.txt, "
                                                  "or criteo/criteo_sample.txt for --model ctr, in "
                                                  "$DDLSCOPE_SHARED_DATA or else the nearest shared/data folder "
                                                  "above the working directory or the ddlscope package)")] = None,
        workers: Annotated[int, typer.Option("--workers", "-w", help="worker processes")] = 2,
        servers: Annotated[int, typer.Option("--servers", "-s", help="parameter-server processes (shards)")] = 2,
        mode: Annotated[str, typer.Option("--mode", help="sync (version check at servers) or async")] = "sync",
        iterations: Annotated[int, typer.Option("--iterations", "-n", help="iterations per worker")] = 1000,
        batch_size: Annotated[int | None, typer.Option("--batch-size", "-b", help="samples per worker "
                                                       "per iteration (default word 256, ctr 32)")] = None,
        optimizer: Annotated[str, typer.Option("--optimizer", help="adagrad or sgd (applied at servers)")] = "adagrad",
        lr: Annotated[float | None, typer.Option("--lr", help="learning rate (default adagrad 0.2)")] = None,
        dim: Annotated[int | None, typer.Option("--dim", help="embedding dimension (default word 32, "
                                                "ctr 8)")] = None,
        hidden: Annotated[int, typer.Option("--hidden", help="MLP hidden width")] = 64,
        window: Annotated[int, typer.Option("--window", help="context words (word model)")] = 4,
        negatives: Annotated[int, typer.Option("--negatives", help="negative samples (word model)")] = 5,
        rows: Annotated[int, typer.Option("--rows", help="hash buckets of the CTR embedding table")] = 1 << 16,
        connections: Annotated[str, typer.Option("--connections", help="persistent (default) or "
                                                 "per-rpc")] = "persistent",
        max_connections: Annotated[int | None, typer.Option("--max-connections", help="connection pool limit per "
                                                            "worker (LRU eviction)")] = None,
        server_threads: Annotated[int | None, typer.Option("--server-threads", help="gRPC handler threads per "
                                                           "server (default: enough for all in-flight RPCs; sync "
                                                           "mode needs at least (workers-1) x (tables+1) + 1)")] = None,
        stall_timeout: Annotated[float, typer.Option("--stall-timeout", help="fail the run when RPCs are in flight "
                                                     "but none completes for this many seconds")] = 60.0,
        out: Annotated[Path, typer.Option("--out", "-o", help="output folder")] = Path("ddlscope-ps-train"),
        log_format: Annotated[str, typer.Option("--log-format", help="parquet, csv or jsonl")] = "parquet",
        otlp: Annotated[bool, typer.Option("--otlp", help="also write OpenTelemetry spans (OTLP JSON)")] = False,
        log_keys: Annotated[bool, typer.Option("--log-keys/--no-log-keys", help="keep each sparse RPC's keys "
                                               "in the log")] = True,
        keep_raw: Annotated[bool, typer.Option("--keep-raw", help="keep the per-process part files")] = False,
        netns: Annotated[bool, typer.Option("--netns", help="each process on its own emulated host "
                                            "(network namespaces; root)")] = False,
        bandwidth_mbit: Annotated[float | None, typer.Option("--bandwidth-mbit", help="emulated link rate per "
                                                             "host and direction, Mbit/s (implies --netns)")] = None,
        delay_ms: Annotated[float | None, typer.Option("--delay-ms", help="emulated one-way delay, ms "
                                                       "(implies --netns)")] = None,
        loss_pct: Annotated[float | None, typer.Option("--loss-pct", help="emulated packet loss, percent "
                                                       "(implies --netns)")] = None,
        inject_failure: Annotated[str | None, typer.Option("--inject-failure", help="SIGKILL one process to test "
                                                           "failure handling: worker:1:5 (worker 1 at iteration "
                                                           "5) or server:0:100 (server 0 at its 100th RPC); "
                                                           "append :stop to freeze it with SIGSTOP instead")] = None,
        seed: Annotated[int, typer.Option("--seed", help="seed of initial values and data order")] = 0,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
        fmt: FormatOpt = "table",
    ) -> None:
        """Run a real parameter-server training on this machine and log every RPC on both sides.

        N worker and M server processes train a sparse model (embedding tables + an MLP) over
        gRPC: workers pull the rows their batch touches and the dense weights, compute (PyTorch,
        CPU), and push gradients; servers apply Adagrad/SGD. Writes to --out: rpcs.parquet (the
        RPC log in the `ddlscope rpc` schema), key_updates.parquet, iterations.parquet,
        vocabulary.parquet, run.json, logs/, and with --otlp spans.otlp.json.
        """
        expected_one_of(fmt, FORMATS)  # before any process starts
        try:
            _ps_train(model, data, workers, servers, mode, iterations, batch_size, optimizer, lr, dim, hidden, window,
                      negatives, rows, connections, max_connections, server_threads, stall_timeout, out, log_format,
                      otlp, log_keys, keep_raw, netns, bandwidth_mbit, delay_ms, loss_pct, inject_failure, seed, quiet,
                      fmt)
        except KeyboardInterrupt:  # Ctrl-C before the run started: nothing to stop, nothing written
            err_console.print("[yellow]interrupted[/yellow]", emoji=False)
            sys.exit(130)


def _ps_train(model, data, workers, servers, mode, iterations, batch_size, optimizer, lr, dim, hidden, window,
              negatives, rows, connections, max_connections, server_threads, stall_timeout, out, log_format, otlp,
              log_keys, keep_raw, netns, bandwidth_mbit, delay_ms, loss_pct, inject_failure, seed, quiet,
              fmt) -> None:
    try:
        cfg = RunConfig(
            model=model, data=data, workers=workers, servers=servers, mode=mode, iterations=iterations,
            batch_size=batch_size, optimizer=optimizer, lr=lr, dim=dim, hidden=hidden, window=window,
            negatives=negatives, rows=rows, connections=connections, max_connections=max_connections,
            server_threads=server_threads, stall_timeout_s=stall_timeout, out=out, log_format=log_format, otlp=otlp,
            log_keys=log_keys, keep_raw=keep_raw,
            netem=NetemConfig(enabled=netns, bandwidth_mbit=bandwidth_mbit, delay_ms=delay_ms, loss_pct=loss_pct),
            inject_failure=FailureInjection.parse(inject_failure) if inject_failure else None, seed=seed,
        )
    except ValidationError as exc:
        raise ValueError(describe_config_error(exc)) from None
    cfg.data_path()  # a missing input or an unusable output folder is a user error before anything starts
    check_output_folder(cfg.out)
    view = _ProgressView(cfg.workers * cfg.iterations, quiet or fmt != "table")
    try:
        with view:
            result = run(cfg, on_progress=view.update, on_warning=view.warn)
    except PsTrainFailedError as exc:
        err_console.print(f"[red]ps-train failed:[/red] {escape(str(exc))}", emoji=False)
        err_console.print(escape(f"process logs: {Path(out) / 'logs'}; what was logged before the failure: "
                                 f"{Path(out)} (run.json: status failed)"), emoji=False)
        sys.exit(1)
    except NetworkEmulationError as exc:
        err_console.print(f"[red]error:[/red] network emulation: {escape(str(exc))}", emoji=False)
        sys.exit(1)
    except PsTrainInterruptedError as exc:
        if exc.result is None:
            err_console.print(escape(str(exc)), emoji=False)
        else:
            s = exc.result.summary
            err_console.print(escape(f"{exc}; every worker and server process was stopped"), emoji=False)
            err_console.print(escape(f"what was logged is in {exc.result.out}: {s['rpcs']:,} RPCs in "
                                     f"{Path(s['files']['rpcs']).name}, run.json (status interrupted), logs/"),
                              emoji=False)
        sys.exit(128 + (exc.signum or signal.SIGINT))
    _print_result(result, fmt)
