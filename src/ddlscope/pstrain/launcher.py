"""Run a parameter-server training: start the processes, watch them, stop them, join their logs.

:func:`run` prepares the data, optionally sets up the emulated network, starts M server and N
worker processes (``python -m ddlscope.pstrain.node``), hands the workers the server addresses,
starts training on all workers at once, reports progress, stops the servers when every worker is
done, and joins the per-process logs into the output folder (:func:`write_outputs`). If any
process dies or fails, every other process is stopped (SIGTERM, then SIGKILL after a grace
period), the namespaces are removed, the logs written so far are joined, and
:class:`PsTrainFailedError` names the process that failed first.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

import ddlscope
from ddlscope.pstrain import logs, netem
from ddlscope.pstrain.config import RunConfig
from ddlscope.pstrain.data import load_ctr, load_text
from ddlscope.pstrain.models import ModelSpec, ctr_model_spec, word_model_spec
from ddlscope.pstrain.server import ServerConfig
from ddlscope.pstrain.worker import WorkerConfig

STOP_GRACE_S = 5.0
"""Seconds a process gets to exit after SIGTERM before SIGKILL."""
SERVER_STOP_TIMEOUT_S = 30.0
OUTPUT_NAMES = ("rpcs", "key_updates", "iterations", "vocabulary")


class PsTrainFailedError(RuntimeError):
    """A run in which a process died or failed. ``result`` holds what was joined of its logs."""

    def __init__(self, message: str, result: RunResult | None = None):
        super().__init__(message)
        self.result = result


@dataclass
class Progress:
    """A run's progress, passed to the ``on_progress`` callback of :func:`run`.

    Attributes:
        phase: ``preparing data``, ``starting``, ``training``, ``stopping``, ``joining`` or ``done``.
        iterations_done, iterations_total: summed over workers.
        loss: mean over workers of their latest batch loss (None before the first).
        rpcs: RPCs completed by all workers; elapsed_s: seconds since training started.
    """

    phase: str
    iterations_done: int
    iterations_total: int
    loss: float | None
    rpcs: int
    elapsed_s: float

    @property
    def rpcs_per_s(self) -> float:
        """Completed RPCs per second of training so far."""
        return self.rpcs / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass
class RunResult:
    """What a run wrote and measured.

    Attributes:
        out: the output folder; files: name -> path of each output.
        summary: the content of ``run.json`` (configuration, sizes, rates, failures, netem).
        log: the joined RPC log.
    """

    out: Path
    files: dict[str, Path]
    summary: dict[str, Any]
    log: pl.DataFrame


@dataclass
class _Proc:
    role: str
    id: int
    popen: subprocess.Popen
    log_path: Path
    buffer: bytes = b""
    ready: bool = False
    done: bool = False
    port: int | None = None
    error: str | None = None
    exited: bool = False
    iterations: int = 0
    loss: float | None = None
    rpcs: int = 0
    stop_sent: bool = False

    @property
    def name(self) -> str:
        return f"{self.role} {self.id}"


# -- data ---------------------------------------------------------------------------------------
def prepare_data(cfg: RunConfig, work_dir: Path) -> tuple[ModelSpec, Path, pl.DataFrame, dict[str, Any]]:
    """Read the input once for all workers.

    Returns:
        (spec, npz path, vocabulary, info): the model; the arrays the workers load (word:
        ``tokens``, ``counts``; ctr: ``keys``, ``dense``, ``labels``); the key -> feature map
        (columns ``table_id``, ``key``, ``feature``, ``count``); and facts for ``run.json``.

    Raises:
        FileNotFoundError, DataFormatError: the input is missing or malformed.
    """
    path = cfg.data_path()
    work_dir.mkdir(parents=True, exist_ok=True)
    npz = work_dir / "data.npz"
    if cfg.model == "word":
        corpus = load_text(path)
        if len(corpus.tokens) <= cfg.window:
            raise ValueError(f"{path}: {len(corpus.tokens)} words; the word model needs more than --window "
                             f"{cfg.window}")
        spec = word_model_spec(len(corpus.words), cfg.effective_dim, cfg.hidden, cfg.window, cfg.negatives)
        np.savez(npz, tokens=corpus.tokens, counts=corpus.counts)
        vocab = pl.concat([corpus.vocabulary().with_columns(pl.lit(t, pl.Int64).alias("table_id"))
                           for t in (0, 1)]).select("table_id", "key", "feature", "count")
        info = {"path": str(path), "format": "text", "words": len(corpus.tokens), "vocabulary": len(corpus.words)}
    else:
        samples = load_ctr(path, cfg.rows)
        spec = ctr_model_spec(cfg.rows, cfg.effective_dim, cfg.hidden, len(samples.fields), samples.dense.shape[1])
        np.savez(npz, keys=samples.keys, dense=samples.dense, labels=samples.labels)
        vocab = samples.feature_map.with_columns(pl.lit(0, pl.Int64).alias("table_id")).select(
            "table_id", "key", "feature", "count")
        info = {"path": str(path), "format": samples.format, "samples": len(samples.labels),
                "fields": len(samples.fields), "dense_features": len(samples.dense_fields),
                "distinct_keys": int(vocab["key"].n_unique())}
    return spec, npz, vocab, info


# -- processes ----------------------------------------------------------------------------------
def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(ddlscope.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def _spawn(role: str, idx: int, spec: dict, raw: Path, logs_dir: Path, prefix: list[str],
           sel: selectors.BaseSelector) -> _Proc:
    spec_path = raw / f"spec-{role}-{idx}.pkl"
    spec_path.write_bytes(pickle.dumps(spec))
    log_path = logs_dir / f"{role}-{idx}.log"
    with open(log_path, "wb") as err:
        popen = subprocess.Popen(
            [*prefix, sys.executable, "-m", "ddlscope.pstrain.node", role, str(idx), str(spec_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=_child_env(), start_new_session=True,
        )
    os.set_blocking(popen.stdout.fileno(), False)
    proc = _Proc(role, idx, popen, log_path)
    sel.register(popen.stdout, selectors.EVENT_READ, proc)
    return proc


def _send(proc: _Proc, line: str) -> None:
    try:
        proc.popen.stdin.write((line + "\n").encode())
        proc.popen.stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _read(proc: _Proc) -> list[dict]:
    """Messages available on ``proc``'s control stream (non-blocking)."""
    out = []
    while True:
        try:
            chunk = os.read(proc.popen.stdout.fileno(), 65536)
        except BlockingIOError:
            break
        except (OSError, ValueError):
            break
        if not chunk:
            break
        proc.buffer += chunk
    *lines, proc.buffer = proc.buffer.split(b"\n")
    for line in lines:
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                out.append({"event": "garbage", "line": line.decode(errors="replace")})
    return out


def _last_stderr_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _describe_exit(proc: _Proc) -> str:
    rc = proc.popen.returncode
    pid = proc.popen.pid
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        what = f"{proc.name} (pid {pid}) was killed by {sig}"
    else:
        what = f"{proc.name} (pid {pid}) exited with status {rc}"
    if proc.role == "worker" and proc.iterations:
        what += f" after {proc.iterations} iteration(s)"
    detail = proc.error or _last_stderr_line(proc.log_path)
    if detail:
        what += f": {detail}"
    return what


def _stop_all(procs: list[_Proc]) -> list[str]:
    """SIGTERM every live process, SIGKILL what is left after the grace period; names those stopped."""
    stopped = []
    for p in procs:
        if p.popen.poll() is None:
            stopped.append(p.name)
            with contextlib.suppress(ProcessLookupError):
                p.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.popen.kill()
            p.popen.wait()
    return stopped


def _close_pipes(procs: list[_Proc]) -> None:
    for p in procs:
        for stream in (p.popen.stdin, p.popen.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


# -- the run ------------------------------------------------------------------------------------
def _sigterm_as_interrupt() -> Callable[[], None]:
    """While a run is on, SIGTERM to the launcher raises KeyboardInterrupt (so the run's cleanup
    stops every process and removes the namespaces); returns the function that restores the old
    handler. Only the main thread can set signal handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


MARKER = ".ddlscope-ps-train"
"""File that marks a folder as a ps-train output folder (earlier outputs in it may be replaced)."""


def claim_output_folder(out: Path) -> None:
    """Make ``out`` ours: a new or empty folder, or one an earlier run wrote (it has :data:`MARKER`).

    Raises:
        ValueError: ``out`` is a file, or a non-empty folder that no ps-train run wrote.
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: is a file; expected a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise ValueError(f"--out {out}: the folder is not empty and was not written by ps-train; "
                         "choose a new or empty folder (earlier outputs in a ps-train folder are replaced)")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by ddlscope ps-train; its outputs here are replaced by the next run\n")


def run(cfg: RunConfig, on_progress: Callable[[Progress], None] | None = None,
        on_warning: Callable[[str], None] | None = None) -> RunResult:
    """Run the training described by ``cfg`` and write its logs to ``cfg.out``.

    Args:
        cfg: the run.
        on_progress: called with a :class:`Progress` up to 10 times a second.
        on_warning: called with each warning (e.g. network emulation not applied).

    Returns:
        The :class:`RunResult`.

    Raises:
        PsTrainFailedError: a process died or failed (the message names it first) or startup timed out.
        FileNotFoundError, ValueError: bad input data or configuration.
    """
    t_launch = time.time()
    warnings: list[str] = []
    restore_sigterm = _sigterm_as_interrupt()

    def warn(text: str) -> None:
        warnings.append(text)
        if on_warning:
            on_warning(text)

    out = Path(cfg.out)
    claim_output_folder(out)
    raw, logs_dir = out / "raw", out / "logs"
    for d in (raw, logs_dir):
        if d.exists():
            shutil.rmtree(d)
    for name in (*OUTPUT_NAMES, "run", "spans.otlp"):
        for old in out.glob(f"{name}.*"):
            old.unlink()
    raw.mkdir(parents=True)
    logs_dir.mkdir(parents=True)
    if on_progress:
        on_progress(Progress("preparing data", 0, cfg.workers * cfg.iterations, None, 0, 0.0))
    spec, npz, vocab, data_info = prepare_data(cfg, raw)

    net: netem.EmulatedNetwork | None = None
    want_net = cfg.netem.enabled or cfg.netem.shaping
    netem_info: dict[str, Any] = {"requested": cfg.netem.model_dump(), "applied": None}
    if want_net and (reason := netem.unavailable_reason()):
        warn(f"{reason}; running on loopback without emulation")
        netem_info["skipped"] = reason
    host_names = [f"server-{s}" for s in range(cfg.servers)] + [f"worker-{w}" for w in range(cfg.workers)]
    procs: list[_Proc] = []
    sel = selectors.DefaultSelector()
    failures: list[str] = []
    stopped: list[str] = []
    t_train_start: float | None = None
    t_train_end: float | None = None
    threads = cfg.server_threads or cfg.workers * (len(spec.tables) + 1) + 4
    try:
        if want_net and "skipped" not in netem_info:
            net = netem.create(host_names, cfg.netem)
            netem_info["applied"] = net.applied
            for w in net.warnings:
                warn(w)
        hostname = socket.gethostname()
        host_of = {h: (h if net else hostname) for h in host_names}
        inj = cfg.inject_failure
        for s in range(cfg.servers):
            scfg = ServerConfig(
                server_id=s, num_servers=cfg.servers, num_workers=cfg.workers, spec=spec, mode=cfg.mode,
                optimizer=cfg.optimizer, lr=cfg.effective_lr, seed=cfg.seed, threads=threads, raw_dir=raw.resolve(),
                host=host_of[f"server-{s}"],
                kill_after_rpcs=inj.at if inj and inj.role == "server" and inj.id == s else None,
            )
            bind = f"{net.hosts[f'server-{s}'].ip}:0" if net else "127.0.0.1:0"
            prefix = net.command_prefix(f"server-{s}") if net else []
            procs.append(_spawn("server", s, {"config": scfg, "bind": bind}, raw, logs_dir, prefix, sel))
        for w in range(cfg.workers):
            wcfg = WorkerConfig(
                worker_id=w, num_workers=cfg.workers, num_servers=cfg.servers, spec=spec, mode=cfg.mode,
                iterations=cfg.iterations, batch_size=cfg.effective_batch_size, seed=cfg.seed, data_path=npz.resolve(),
                raw_dir=raw.resolve(), host=host_of[f"worker-{w}"], per_rpc=cfg.connections == "per-rpc",
                max_connections=cfg.max_connections, rpc_timeout_s=cfg.rpc_timeout_s,
                connect_timeout_s=cfg.connect_timeout_s, log_keys=cfg.log_keys,
                kill_at_iteration=inj.at if inj and inj.role == "worker" and inj.id == w else None,
            )
            prefix = net.command_prefix(f"worker-{w}") if net else []
            procs.append(_spawn("worker", w, {"config": wcfg}, raw, logs_dir, prefix, sel))
        servers = [p for p in procs if p.role == "server"]
        workers = [p for p in procs if p.role == "worker"]
        total_iterations = cfg.workers * cfg.iterations
        phase = "starting"
        addresses_sent = False
        last_report = 0.0
        startup_deadline = time.monotonic() + cfg.startup_timeout_s

        def progress() -> Progress:
            losses = [p.loss for p in workers if p.loss is not None]
            elapsed = (t_train_end or time.time()) - t_train_start if t_train_start else 0.0
            return Progress(phase, sum(p.iterations for p in workers), total_iterations,
                            float(np.mean(losses)) if losses else None, sum(p.rpcs for p in workers), elapsed)

        while True:
            for key, _ in sel.select(timeout=0.1):
                proc: _Proc = key.data
                for msg in _read(proc):
                    ev = msg.get("event")
                    if ev == "ready":
                        proc.ready, proc.port = True, msg.get("port")
                    elif ev == "progress":
                        proc.iterations, proc.loss, proc.rpcs = msg["iterations"], msg["loss"], msg["rpcs"]
                    elif ev == "done":
                        proc.done = True
                        proc.rpcs = msg.get("rpcs", proc.rpcs)
                    elif ev == "error":
                        proc.error = msg.get("message")
            newly_dead = []
            for p in procs:
                if not p.exited and p.popen.poll() is not None:
                    p.exited = True
                    for msg in _read(p):
                        if msg.get("event") == "error":
                            p.error = msg.get("message")
                        elif msg.get("event") == "done":
                            p.done = True
                    with contextlib.suppress(KeyError, ValueError):
                        sel.unregister(p.popen.stdout)
                    clean = p.popen.returncode == 0 and p.done and (p.role == "worker" or p.stop_sent)
                    if not clean:
                        newly_dead.append(p)
            if newly_dead:
                # a process killed by a signal is the likelier root cause than one whose RPCs then failed
                newly_dead.sort(key=lambda p: (p.popen.returncode >= 0, p.role != "server"))
                failures.extend(_describe_exit(p) for p in newly_dead)
                break
            now = time.monotonic()
            if phase == "starting":
                if not addresses_sent and all(p.ready for p in servers):
                    addr = [f"{net.hosts[f'server-{p.id}'].ip if net else '127.0.0.1'}:{p.port}" for p in servers]
                    hosts = [host_of[f"server-{p.id}"] for p in servers]
                    for p in workers:
                        _send(p, json.dumps({"addresses": addr, "hosts": hosts}))
                    addresses_sent = True
                if addresses_sent and all(p.ready for p in workers):
                    for p in workers:
                        _send(p, "start")
                    t_train_start = time.time()
                    phase = "training"
                elif now > startup_deadline:
                    late = [p.name for p in procs if not p.ready]
                    failures.append(f"startup timed out after {cfg.startup_timeout_s} s waiting for {', '.join(late)}")
                    break
            elif phase == "training" and all(p.exited for p in workers):
                t_train_end = time.time()
                phase = "stopping"
                for p in servers:
                    p.stop_sent = True
                    _send(p, "stop")
                stop_deadline = now + SERVER_STOP_TIMEOUT_S
            elif phase == "stopping":
                if all(p.exited for p in servers):
                    break
                if now > stop_deadline:
                    failures.append("servers did not stop within "
                                    f"{SERVER_STOP_TIMEOUT_S} s: {', '.join(p.name for p in servers if not p.exited)}")
                    break
            if on_progress and now - last_report >= 0.1:
                last_report = now
                on_progress(progress())
        if failures:
            stopped = _stop_all(procs)
        if t_train_start and t_train_end is None:
            t_train_end = time.time()
        if on_progress:
            phase = "joining"
            on_progress(progress())
    finally:
        # whatever happened (also Ctrl-C): no process and no namespace outlives the run
        leftover = _stop_all(procs)
        stopped = stopped or leftover
        _close_pipes(procs)
        sel.close()
        if net is not None:
            net.close()
        restore_sigterm()
    summary = {
        "status": "failed" if failures else "ok",
        "failures": failures,
        "stopped_after_failure": stopped if failures else [],
        "config": json.loads(cfg.model_dump_json()),
        "effective": {"batch_size": cfg.effective_batch_size, "lr": cfg.effective_lr, "dim": cfg.effective_dim,
                      "server_threads": threads},
        "model": {"kind": spec.kind, "tables": [t.__dict__ for t in spec.tables],
                  "dense": [{"tensor_id": d.tensor_id, "name": d.name, "shape": list(d.shape)} for d in spec.dense],
                  **spec.params},
        "data": data_info,
        "netem": netem_info,
        "warnings": warnings,
        "processes": [{"name": p.name, "pid": p.popen.pid, "exit_status": p.popen.returncode,
                       "log": str(p.log_path)} for p in procs],
        "train_wall_s": (t_train_end - t_train_start) if t_train_start and t_train_end else None,
        "versions": _versions(),
    }
    result = write_outputs(cfg, raw, vocab, summary, success=not failures)
    result.summary["total_wall_s"] = time.time() - t_launch
    (out / "run.json").write_text(json.dumps(result.summary, indent=2, default=str))
    if on_progress:
        phase = "done"
        done_iterations = sum(p.iterations for p in procs if p.role == "worker")
        on_progress(Progress("done", done_iterations, cfg.workers * cfg.iterations, result.summary.get("loss_last"),
                             result.summary["rpcs"], result.summary["train_wall_s"] or 0.0))
    if failures:
        msg = "; ".join(failures)
        if stopped:
            msg += f" (stopped {len(stopped)} other process(es): {', '.join(stopped)})"
        raise PsTrainFailedError(msg, result)
    return result


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for pkg in ("grpcio", "torch", "numpy", "polars"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def write_outputs(cfg: RunConfig, raw: Path, vocab: pl.DataFrame, summary: dict[str, Any],
                  success: bool) -> RunResult:
    """Join the part files under ``raw`` and write the run's outputs next to it.

    Writes ``rpcs``, ``key_updates``, ``iterations``, ``vocabulary`` (in ``cfg.log_format``),
    ``spans.otlp.json`` (``cfg.otlp``), and completes ``summary`` with the log's size and rates
    (``train_wall_s``: first iteration start to last iteration end over all workers;
    ``rpcs_per_s`` = logged RPCs / ``train_wall_s``).
    ``raw`` is removed after a successful run unless ``cfg.keep_raw``.
    """
    from ddlscope.pstrain.otlp import write_otlp_json

    out = raw.parent
    log, excluded = logs.join_rpc_rows(logs.read_client_rows(raw), logs.read_server_rows(raw))
    if not cfg.log_keys:
        log = log.drop("keys")
    updates = logs.read_key_updates(raw)
    iterations = logs.read_iterations(raw)
    files = {
        "rpcs": logs.write_table(log, out / "rpcs", cfg.log_format),
        "key_updates": logs.write_table(updates, out / "key_updates", cfg.log_format),
        "iterations": logs.write_table(iterations, out / "iterations", cfg.log_format),
        "vocabulary": logs.write_table(vocab, out / "vocabulary", cfg.log_format),
    }
    if cfg.otlp:
        files["spans"] = write_otlp_json(out / "spans.otlp.json", log, iterations)
    files["run"] = out / "run.json"
    files["logs"] = out / "logs"
    if iterations.height:
        # first iteration start to last iteration end (worker clocks; one machine, one clock)
        summary["train_wall_s"] = (iterations["iteration_end_ns"].max() - iterations["iteration_start_ns"].min()) / 1e9
    wall = summary.get("train_wall_s") or 0.0
    by_op = log.group_by("op").agg(pl.len().alias("rpcs")).sort("op")
    loss_by_it = iterations.group_by("iteration").agg(pl.col("loss").mean()).sort("iteration")
    n_first = max(1, min(10, loss_by_it.height // 4))
    summary.update({
        "rpcs": log.height,
        "rpcs_by_op": {str(r["op"]): r["rpcs"] for r in by_op.iter_rows(named=True)},
        "rpcs_excluded": excluded,
        "timestamp_order_violations": logs.timestamp_order_violations(log),
        "connections_opened": int(log.filter(pl.col("connection_event") != "reuse").height),
        "rpcs_per_s": log.height / wall if wall else None,
        "iterations_logged": iterations.height,
        "loss_first": float(loss_by_it["loss"].head(n_first).mean()) if loss_by_it.height else None,
        "loss_last": float(loss_by_it["loss"].tail(n_first).mean()) if loss_by_it.height else None,
        "keys_pushed": int(log.filter(pl.col("op") == "push_sparse")["num_keys"].sum()),
        "key_updates": int(updates["updates"].sum()),
        "files": {k: str(v) for k, v in files.items()},
    })
    if success and not cfg.keep_raw:
        shutil.rmtree(raw, ignore_errors=True)
    return RunResult(out, files, summary, log)

