"""Run a parameter-server training: start the processes, watch them, stop them, join their logs.

:func:`run` reads and checks the input (:func:`load_input`) before it touches the output folder,
optionally sets up the emulated network, starts M server and N worker processes
(``python -m ddlscope.pstrain.node``), hands the workers the server addresses, starts training on
all workers at once, reports progress, stops the servers when every worker is done, and joins the
per-process logs (:func:`write_outputs`).

Everything is written into a staging folder ``OUT/.running-<pid>-<id>/``; only when the run has
its outputs (also those of a failed or interrupted run) do they replace the previous run's in
``OUT`` (:func:`publish`). A run rejected for bad options or input leaves ``OUT`` as it was.

If any process dies or fails, or no RPC completes for ``stall_timeout_s`` while RPCs are in flight
(the stall watchdog), every process is stopped (SIGTERM, then SIGKILL after a grace period), the
namespaces are removed, the logs written so far are joined with ``status: failed``, and
:class:`PsTrainFailedError` names what failed first. Ctrl-C or SIGTERM to the launcher does the
same with ``status: interrupted`` and :class:`PsTrainInterruptedError`.
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
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

import ddlscope
from ddlscope.pstrain import logs, netem
from ddlscope.pstrain.config import RunConfig
from ddlscope.pstrain.data import DataFormatError, load_ctr, load_text
from ddlscope.pstrain.models import ModelSpec, ctr_model_spec, word_model_spec
from ddlscope.pstrain.server import ServerConfig
from ddlscope.pstrain.worker import WorkerConfig

STOP_GRACE_S = 5.0
"""Seconds a process gets to exit after SIGTERM before SIGKILL."""
SERVER_STOP_TIMEOUT_S = 30.0
KILLED_PEER_GRACE_S = 1.0
"""Seconds the supervisor waits, when only processes that exited with a status died, for another to be
reaped as killed by a signal: the likelier root cause (a killed server's sockets close while it is still
exiting, so the workers whose RPCs fail can be reaped first on a loaded machine)."""


class PsTrainFailedError(RuntimeError):
    """A run in which a process died or failed, or that stalled. ``result`` holds what was joined
    of its logs."""

    def __init__(self, message: str, result: RunResult | None = None):
        super().__init__(message)
        self.result = result


class PsTrainInterruptedError(KeyboardInterrupt):
    """A run stopped by Ctrl-C (SIGINT) or SIGTERM to the launcher.

    Attributes:
        result: what was joined of its logs (``run.json`` has ``status: interrupted``), or None
            when the signal came before any process started (nothing was written).
        signum: the signal.
    """

    def __init__(self, message: str, result: RunResult | None, signum: int):
        super().__init__(message)
        self.result = result
        self.signum = signum


@dataclass
class Progress:
    """A run's progress, passed to the ``on_progress`` callback of :func:`run`.

    Attributes:
        phase: ``preparing data``, ``starting``, ``training``, ``stopping``, ``joining``, then ``done``,
            ``failed`` or ``interrupted``.
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
    in_flight: int = 0
    iteration: int = 0
    stop_sent: bool = False

    @property
    def name(self) -> str:
        return f"{self.role} {self.id}"


# -- data ---------------------------------------------------------------------------------------
@dataclass
class RunInput:
    """A run's input, read and checked once for all workers (:func:`load_input`).

    Attributes:
        spec: the model.
        arrays: what the workers load (word: ``tokens``, ``counts``; ctr: ``keys``, ``dense``,
            ``labels``), written as ``raw/data.npz``.
        vocabulary: the key -> feature map (columns ``table_id``, ``key``, ``feature``, ``count``).
        info: facts for ``run.json``.
        warnings: what the reader skipped (e.g. blank lines), to be shown to the user.
    """

    spec: ModelSpec
    arrays: dict[str, np.ndarray]
    vocabulary: pl.DataFrame
    info: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def load_input(cfg: RunConfig) -> RunInput:
    """Read and check the input of ``cfg``; writes nothing.

    Raises:
        FileNotFoundError, IsADirectoryError: the input is missing or a folder.
        DataFormatError: the input is malformed (file, line and field named), or too small for
            ``cfg.workers`` workers (each needs at least one sample).
    """
    path = cfg.data_path()
    if cfg.model == "word":
        corpus = load_text(path)
        samples = len(corpus.tokens) - cfg.window
        if samples < cfg.workers:
            raise DataFormatError(
                f"{path}: {len(corpus.tokens)} words give {max(samples, 0)} sample(s) (a word after a full context "
                f"of --window {cfg.window} words); --workers {cfg.workers} need at least one each")
        spec = word_model_spec(len(corpus.words), cfg.effective_dim, cfg.hidden, cfg.window, cfg.negatives)
        arrays = {"tokens": corpus.tokens, "counts": corpus.counts}
        vocab = pl.concat([corpus.vocabulary().with_columns(pl.lit(t, pl.Int64).alias("table_id"))
                           for t in (0, 1)]).select("table_id", "key", "feature", "count")
        info = {"path": str(path), "format": "text", "words": len(corpus.tokens), "vocabulary": len(corpus.words)}
        return RunInput(spec, arrays, vocab, info)
    ctr = load_ctr(path, cfg.rows)
    if len(ctr.labels) < cfg.workers:
        raise DataFormatError(f"{path}: {len(ctr.labels)} sample(s); --workers {cfg.workers} need at least one each")
    spec = ctr_model_spec(cfg.rows, cfg.effective_dim, cfg.hidden, len(ctr.fields), ctr.dense.shape[1])
    arrays = {"keys": ctr.keys, "dense": ctr.dense, "labels": ctr.labels}
    vocab = ctr.feature_map.with_columns(pl.lit(0, pl.Int64).alias("table_id")).select(
        "table_id", "key", "feature", "count")
    info = {"path": str(path), "format": ctr.format, "samples": len(ctr.labels), "fields": len(ctr.fields),
            "dense_features": len(ctr.dense_fields), "distinct_keys": int(vocab["key"].n_unique()),
            "blank_lines_skipped": ctr.blank_lines}
    warnings = []
    if ctr.blank_lines:
        warnings.append(f"{path}: {ctr.blank_lines} blank line(s) skipped")
    return RunInput(spec, arrays, vocab, info, warnings)


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
    """SIGTERM every live process (and SIGCONT, so that a frozen one handles it), SIGKILL what is
    left after the grace period; names those stopped."""
    stopped = []
    for p in procs:
        if p.popen.poll() is None:
            stopped.append(p.name)
            with contextlib.suppress(ProcessLookupError):
                p.popen.send_signal(signal.SIGTERM)
                p.popen.send_signal(signal.SIGCONT)
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


# -- the output folder ----------------------------------------------------------------------------
MARKER = ".ddlscope-ps-train"
"""File that marks a folder as a ps-train output folder (earlier outputs in it may be replaced)."""
STAGING_PREFIX = ".running-"
"""A run writes into ``OUT/.running-<launcher pid>-<id>/`` until :func:`publish`."""
OUTPUT_PATTERNS = ("rpcs.*", "key_updates.*", "iterations.*", "vocabulary.*", "spans.otlp.json", "run.json",
                   "logs", "raw")
"""What a run writes in ``OUT``: the previous run's are removed when a new run publishes its own."""


def check_output_folder(out: Path) -> None:
    """Check, without changing anything, that a run may write to ``out``: a new folder (its nearest
    existing parent writable), an empty one, or one an earlier run wrote (it has :data:`MARKER`).

    Raises:
        ValueError: ``out`` is a file, a non-empty folder that no ps-train run wrote, or not writable.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: is a file; expected a folder")
    if out.is_dir():
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise ValueError(f"--out {out}: the folder is not empty and was not written by ps-train; choose a new or "
                             "empty folder (a ps-train folder's earlier outputs are replaced when a run has new ones)")
        if not os.access(out, os.W_OK | os.X_OK):
            raise ValueError(f"--out {out}: the folder is not writable")
        return
    parent = out.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out}: cannot create it ({parent} is not a writable folder)")


def claim_output_folder(out: Path) -> None:
    """Create ``out`` if needed and mark it (:data:`MARKER`); see :func:`check_output_folder`.

    Raises:
        ValueError: as :func:`check_output_folder`.
    """
    check_output_folder(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by ddlscope ps-train; its outputs here are replaced by the next run\n")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _new_staging_folder(out: Path) -> Path:
    """Claim ``out``, remove staging folders of launchers that no longer exist, create this run's."""
    claim_output_folder(out)
    for old in out.glob(f"{STAGING_PREFIX}*"):
        pid = old.name.removeprefix(STAGING_PREFIX).split("-")[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    stage = out / f"{STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    (stage / "raw").mkdir(parents=True)
    (stage / "logs").mkdir()
    return stage


def publish(stage: Path, out: Path) -> None:
    """Replace the previous run's outputs in ``out`` (:data:`OUTPUT_PATTERNS`) by those in
    ``stage``, and remove ``stage``. Renames within one file system: each output appears whole."""
    for pattern in OUTPUT_PATTERNS:
        for old in out.glob(pattern):
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
    for new in sorted(stage.iterdir(), key=lambda p: p.name == "run.json"):  # run.json last
        new.rename(out / new.name)
    stage.rmdir()


# -- the run ------------------------------------------------------------------------------------
class _Signals:
    """Ctrl-C (SIGINT) and SIGTERM to the launcher while a run is on (main thread only).

    Until :attr:`deferred` is set (before any process starts) a signal raises KeyboardInterrupt;
    after, it is only recorded in :attr:`signum` and the run's loop stops the run cleanly (an
    exception raised from a signal handler can land anywhere, e.g. inside a weakref callback where
    it is lost). Once the run is stopping, later signals are recorded and otherwise ignored.
    """

    def __init__(self):
        self.signum: int | None = None
        self.deferred = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        if not self.deferred:
            raise KeyboardInterrupt(signal.Signals(signum).name)

    def __exit__(self, *exc: Any) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


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
        PsTrainFailedError: a process died or failed (the message names it first), startup timed
            out, or the run stalled; its outputs (``status: failed``) replaced the previous ones.
        PsTrainInterruptedError: Ctrl-C or SIGTERM; its outputs (``status: interrupted``) replaced
            the previous ones if any RPC had completed (else nothing was written).
        FileNotFoundError, ValueError: bad input data, configuration or output folder (nothing
            written; ``cfg.out`` as it was).
        NetworkEmulationError: the emulated network could not be set up (nothing written).
    """
    t_launch = time.time()
    warnings: list[str] = []

    def warn(text: str) -> None:
        warnings.append(text)
        if on_warning:
            on_warning(text)

    out = Path(cfg.out)
    stage: Path | None = None
    published = False
    with _Signals() as signals:
        try:
            try:
                check_output_folder(out)
                if on_progress:
                    on_progress(Progress("preparing data", 0, cfg.workers * cfg.iterations, None, 0, 0.0))
                inp = load_input(cfg)
            except KeyboardInterrupt:
                sig = signals.signum or signal.SIGINT
                raise PsTrainInterruptedError(f"interrupted by {signal.Signals(sig).name} while reading the input; "
                                              "nothing was written", None, sig) from None
            for w in inp.warnings:
                warn(w)
            signals.deferred = True
            stage = _new_staging_folder(out)
            np.savez(stage / "raw" / "data.npz", **inp.arrays)
            outcome = _train(cfg, inp, stage, signals, warn, on_progress)
            result = _finish(cfg, inp, stage, out, outcome, warnings, t_launch, on_progress)
            published = result is not None
        finally:
            if stage is not None and not published:
                shutil.rmtree(stage, ignore_errors=True)
    if result is None:
        name = signal.Signals(outcome.signum or signal.SIGINT).name
        raise PsTrainInterruptedError(f"interrupted by {name} before any RPC completed; every worker and server "
                                      "process was stopped; nothing was written", None, outcome.signum or signal.SIGINT)
    if outcome.failures:
        msg = "; ".join(outcome.failures)
        if outcome.stopped:
            other = "other " if outcome.failed_process else ""
            msg += f" (stopped {len(outcome.stopped)} {other}process(es): {', '.join(outcome.stopped)})"
        raise PsTrainFailedError(msg, result)
    if outcome.signum is not None:
        s = result.summary
        raise PsTrainInterruptedError(
            f"interrupted by {signal.Signals(outcome.signum).name} after {s['iterations_logged']} of "
            f"{cfg.workers * cfg.iterations} iterations", result, outcome.signum)
    return result


@dataclass
class _Outcome:
    """What happened to the processes of a run (internal to :func:`run`)."""

    procs: list[_Proc]
    threads: int
    netem_info: dict[str, Any]
    failures: list[str] = field(default_factory=list)
    failed_process: bool = False
    stopped: list[str] = field(default_factory=list)
    signum: int | None = None
    t_train_start: float | None = None
    t_train_end: float | None = None


def _stall_message(cfg: RunConfig, workers: list[_Proc], threads: int) -> str:
    waiting = [p for p in workers if p.in_flight and not p.exited]
    detail = "; ".join(f"worker {p.id}: {p.in_flight} in flight in iteration {p.iteration}" for p in waiting)
    total = sum(p.in_flight for p in waiting)
    return (f"stalled: no RPC completed for {cfg.stall_timeout_s:g} s while {total} were in flight ({detail}); "
            f"the servers ({threads} handler threads each) may be frozen, overloaded or deadlocked, see the "
            f"process logs (--stall-timeout sets this limit)")


def _train(cfg: RunConfig, inp: RunInput, stage: Path, signals: _Signals, warn: Callable[[str], None],
           on_progress: Callable[[Progress], None] | None) -> _Outcome:
    """Start the processes, run the training, stop them; every process is gone when this returns."""
    raw, logs_dir = stage / "raw", stage / "logs"
    spec = inp.spec
    npz = raw / "data.npz"
    net: netem.EmulatedNetwork | None = None
    want_net = cfg.netem.enabled or cfg.netem.shaping
    outcome = _Outcome([], cfg.effective_server_threads, {"requested": cfg.netem.model_dump(), "applied": None})
    netem_info = outcome.netem_info
    if want_net and (reason := netem.unavailable_reason()):
        warn(f"{reason}; running on loopback without emulation")
        netem_info["skipped"] = reason
    host_names = [f"server-{s}" for s in range(cfg.servers)] + [f"worker-{w}" for w in range(cfg.workers)]
    procs = outcome.procs
    if signals.signum is not None:  # a signal while the run was being set up: start nothing
        outcome.signum = signals.signum
        return outcome
    sel = selectors.DefaultSelector()
    failures = outcome.failures
    threads = outcome.threads
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
                kill_signal=inj.signal if inj else "KILL",
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
                kill_signal=inj.signal if inj else "KILL",
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
        last_rpc_total, last_rpc_change = 0, time.monotonic()

        def progress() -> Progress:
            losses = [p.loss for p in workers if p.loss is not None]
            t0, t1 = outcome.t_train_start, outcome.t_train_end
            elapsed = (t1 or time.time()) - t0 if t0 else 0.0
            return Progress(phase, sum(p.iterations for p in workers), total_iterations,
                            float(np.mean(losses)) if losses else None, sum(p.rpcs for p in workers), elapsed)

        while True:
            if signals.signum is not None:
                outcome.signum = signals.signum
                break
            for key, _ in sel.select(timeout=0.1):
                proc: _Proc = key.data
                for msg in _read(proc):
                    ev = msg.get("event")
                    if ev == "ready":
                        proc.ready, proc.port = True, msg.get("port")
                    elif ev == "progress":
                        proc.iterations, proc.loss, proc.rpcs = msg["iterations"], msg["loss"], msg["rpcs"]
                        proc.in_flight, proc.iteration = 0, msg["iterations"]
                    elif ev == "rpcs":
                        proc.rpcs = max(proc.rpcs, msg["completed"])
                        proc.in_flight, proc.iteration = msg["in_flight"], msg["iteration"]
                    elif ev == "done":
                        proc.done = True
                        proc.in_flight = 0
                        proc.rpcs = msg.get("rpcs", proc.rpcs)
                    elif ev == "error":
                        proc.error = msg.get("message")
            def reap(p: _Proc) -> bool:
                """Mark an exited process, read what it wrote last; True if it did not end cleanly."""
                p.exited = True
                for msg in _read(p):
                    if msg.get("event") == "error":
                        p.error = msg.get("message")
                    elif msg.get("event") == "done":
                        p.done = True
                with contextlib.suppress(KeyError, ValueError):
                    sel.unregister(p.popen.stdout)
                return not (p.popen.returncode == 0 and p.done and (p.role == "worker" or p.stop_sent))

            newly_dead = [p for p in procs if not p.exited and p.popen.poll() is not None and reap(p)]
            if newly_dead and all(p.popen.returncode >= 0 for p in newly_dead):
                # a process killed by a signal closes its sockets before it can be reaped, so the workers
                # whose RPCs it broke may be reaped first (on a loaded machine): wait a moment for it
                grace = time.monotonic() + KILLED_PEER_GRACE_S
                while time.monotonic() < grace:
                    killed = [p for p in procs if not p.exited and p.popen.poll() is not None
                              and p.popen.returncode < 0 and reap(p)]
                    if killed:
                        newly_dead.extend(killed)
                        break
                    time.sleep(0.02)
            if newly_dead:
                # a process killed by a signal is the likelier root cause than one whose RPCs then failed
                newly_dead.sort(key=lambda p: (p.popen.returncode >= 0, p.role != "server"))
                failures.extend(_describe_exit(p) for p in newly_dead)
                outcome.failed_process = True
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
                    outcome.t_train_start = time.time()
                    last_rpc_change = now
                    phase = "training"
                elif now > startup_deadline:
                    late = [p.name for p in procs if not p.ready]
                    failures.append(f"startup timed out after {cfg.startup_timeout_s:g} s waiting for "
                                    f"{', '.join(late)}")
                    break
            elif phase == "training":
                rpc_total = sum(p.rpcs for p in workers)
                if rpc_total != last_rpc_total:
                    last_rpc_total, last_rpc_change = rpc_total, now
                elif now - last_rpc_change > cfg.stall_timeout_s and all(p.in_flight for p in workers if not p.exited):
                    # every live worker waits for an RPC (none is computing) and none completed for that long
                    failures.append(_stall_message(cfg, workers, threads))
                    break
                if all(p.exited for p in workers):
                    outcome.t_train_end = time.time()
                    phase = "stopping"
                    for p in servers:
                        p.stop_sent = True
                        _send(p, "stop")
                    stop_deadline = now + SERVER_STOP_TIMEOUT_S
            elif phase == "stopping":
                if all(p.exited for p in servers):
                    break
                if now > stop_deadline:
                    late = [p.name for p in servers if not p.exited]
                    failures.append(f"servers did not stop within {SERVER_STOP_TIMEOUT_S:g} s: {', '.join(late)}")
                    break
            if on_progress and now - last_report >= 0.1:
                last_report = now
                on_progress(progress())
        if failures or outcome.signum is not None:
            phase = "stopping"
            if on_progress:
                on_progress(progress())
            outcome.stopped = _stop_all(procs)
        if outcome.t_train_start and outcome.t_train_end is None:
            outcome.t_train_end = time.time()
        if on_progress:
            phase = "joining"
            on_progress(progress())
    finally:
        # whatever happened: no process and no namespace outlives the run
        leftover = _stop_all(procs)
        outcome.stopped = outcome.stopped or leftover
        _close_pipes(procs)
        sel.close()
        if net is not None:
            net.close()
    return outcome


def _finish(cfg: RunConfig, inp: RunInput, stage: Path, out: Path, outcome: _Outcome, warnings: list[str],
            t_launch: float, on_progress: Callable[[Progress], None] | None) -> RunResult | None:
    """Join the logs in ``stage``, write ``run.json``, and publish everything to ``out``; None (and
    nothing published) for a run interrupted before any RPC completed."""
    failed = bool(outcome.failures)
    status = "failed" if failed else "interrupted" if outcome.signum is not None else "ok"
    t0, t1 = outcome.t_train_start, outcome.t_train_end
    spec = inp.spec
    summary = {
        "status": status,
        "failures": outcome.failures,
        "stopped_after_failure": outcome.stopped if failed else [],
        "interrupted_by": signal.Signals(outcome.signum).name if outcome.signum is not None else None,
        "config": json.loads(cfg.model_dump_json()),
        "effective": {"batch_size": cfg.effective_batch_size, "lr": cfg.effective_lr, "dim": cfg.effective_dim,
                      "server_threads": outcome.threads, "min_server_threads": cfg.required_server_threads},
        "model": {"kind": spec.kind, "tables": [t.__dict__ for t in spec.tables],
                  "dense": [{"tensor_id": d.tensor_id, "name": d.name, "shape": list(d.shape)} for d in spec.dense],
                  **spec.params},
        "data": inp.info,
        "netem": outcome.netem_info,
        "warnings": warnings,
        "processes": [{"name": p.name, "pid": p.popen.pid, "exit_status": p.popen.returncode,
                       "log": str(out / "logs" / p.log_path.name)} for p in outcome.procs],
        "train_wall_s": (t1 - t0) if t0 and t1 else None,
        "versions": _versions(),
    }
    result = write_outputs(cfg, stage / "raw", inp.vocabulary, summary, success=status == "ok", final_out=out)
    if status == "interrupted" and not result.summary["rpcs"] and not result.summary["iterations_logged"]:
        if on_progress:
            on_progress(Progress("interrupted", 0, cfg.workers * cfg.iterations, None, 0, 0.0))
        return None  # nothing worth replacing the previous run's outputs with
    result.summary["total_wall_s"] = time.time() - t_launch
    (stage / "run.json").write_text(json.dumps(result.summary, indent=2, default=str))
    publish(stage, out)
    if on_progress:
        done_iterations = sum(p.iterations for p in outcome.procs if p.role == "worker")
        on_progress(Progress("done" if status == "ok" else status, done_iterations, cfg.workers * cfg.iterations,
                             result.summary.get("loss_last"), result.summary["rpcs"],
                             result.summary["train_wall_s"] or 0.0))
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
                  success: bool, final_out: Path | None = None) -> RunResult:
    """Join the part files under ``raw`` and write the run's outputs next to it.

    Writes ``rpcs``, ``key_updates``, ``iterations``, ``vocabulary`` (in ``cfg.log_format``),
    ``spans.otlp.json`` (``cfg.otlp``), and completes ``summary`` with the log's size and rates
    (``train_wall_s``: first iteration start to last iteration end over all workers;
    ``rpcs_per_s`` = logged RPCs / ``train_wall_s``) and the part files that ended with a cut
    write (``truncated_part_files``). ``raw`` is removed after a successful run unless
    ``cfg.keep_raw``. ``final_out``: where the outputs will be published (the paths in the result
    and summary name it; default: next to ``raw``).
    """
    from ddlscope.pstrain.otlp import write_otlp_json

    out = raw.parent
    final = Path(final_out) if final_out is not None else out
    truncated = logs.truncated_parts(raw)
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
    files = {k: final / v.relative_to(out) for k, v in files.items()}
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
        "truncated_part_files": truncated,
        "files": {k: str(v) for k, v in files.items()},
    })
    if success and not cfg.keep_raw:
        shutil.rmtree(raw, ignore_errors=True)
    return RunResult(final, files, summary, log)

