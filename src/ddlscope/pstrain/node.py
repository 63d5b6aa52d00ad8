"""Entry point of one worker or server process: ``python -m ddlscope.pstrain.node ROLE ID SPEC``.

The launcher starts every process with this module and talks to it over pipes:

* the child writes JSON lines to its original standard output (the *control* stream; its
  ``sys.stdout`` is redirected to standard error so that nothing else can mix in): ``ready``
  (with the bound ``port`` for servers), ``progress`` (workers: iterations done, loss, RPCs),
  ``done`` and ``error`` (with a message);
* the launcher writes lines to the child's standard input: a worker first receives the server
  addresses as JSON, then ``start``; a server receives ``stop``. End of input (the launcher went
  away) stops the child, and ``PR_SET_PDEATHSIG`` sends it SIGTERM if the launcher dies, so no
  process outlives its run.

SIGTERM makes the child write its buffered log rows and exit with status 143. The signal is
never delivered as an exception into whatever code happens to run (an exception raised from a
Python signal handler can land inside a weakref callback or a ``finally`` clause and be lost, or
interrupt the very write that saves the rows): SIGTERM is blocked in every thread and taken by a
dedicated thread with ``sigwait``, which writes the rows (waiting for a write already in
progress) and ends the process with ``os._exit(143)``. End of standard input does the same with
status 1. Between signals, workers append their rows to their part files after every iteration
and servers every :data:`SERVER_FLUSH_INTERVAL_S`, so even SIGKILL loses at most one iteration
(worker) or 0.2 s (server) of rows.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

SERVER_FLUSH_INTERVAL_S = 0.2
"""A server appends its buffered log rows to its part files this often (seconds)."""
HEARTBEAT_INTERVAL_S = 0.5
"""A worker reports its RPCs completed and in flight this often while they change (seconds)."""

_final_flushes: list[Callable[[], None]] = []
_terminating = threading.Lock()


class Control:
    """The JSON-lines control stream to the launcher (thread-safe)."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self._lock = threading.Lock()

    def send(self, event: str, **fields: Any) -> None:
        """Write one message ``{"event": event, **fields}``."""
        line = json.dumps({"event": event, **fields})
        with self._lock:
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (BrokenPipeError, ValueError):
                pass


def _take_control_stream() -> Control:
    """Keep the original stdout for control messages; send fd 1 (and sys.stdout) to stderr."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return Control(os.fdopen(fd, "w", buffering=1))


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent (the launcher) dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _terminate(status: int) -> None:
    """Write every buffered log row (the process's last flush) and exit with ``status`` at once.

    The first caller wins; a second one (SIGTERM while the end of input is being handled) waits
    here until the process is gone.
    """
    _terminating.acquire()
    for flush in _final_flushes:
        try:
            flush()
        except Exception:  # a failed write must not keep the process alive
            traceback.print_exc()
    sys.stderr.flush()
    os._exit(status)


def _take_sigterm() -> None:
    """Block SIGTERM in this thread and every thread started after it; a dedicated thread waits for
    it and terminates the process cleanly (module docstring)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def wait() -> None:
        signal.sigwait({signal.SIGTERM})
        _terminate(143)

    threading.Thread(target=wait, name="sigterm", daemon=True).start()


def _read_line() -> str | None:
    line = sys.stdin.readline()
    return line.strip() if line else None


def _watch_stdin() -> None:
    """Stop when the launcher closes our input (it went away, or gives up on us): keep the rows."""
    while (line := sys.stdin.readline()) and line.strip() != "stop":
        pass
    _terminate(1)


def run_server(spec: dict, control: Control) -> int:
    """Serve until ``stop`` or end of input, appending log rows to the part files every
    :data:`SERVER_FLUSH_INTERVAL_S`; 0 on success."""
    from ddlscope.pstrain.server import start_server

    cfg = spec["config"]
    ps, server, port = start_server(cfg, spec["bind"])
    _final_flushes.append(lambda: ps.flush(final=True))
    control.send("ready", port=port, pid=os.getpid())
    stop = threading.Event()

    def read_stdin() -> None:
        while (line := _read_line()) is not None and line != "stop":
            pass
        stop.set()

    threading.Thread(target=read_stdin, name="stdin", daemon=True).start()
    try:
        while not stop.wait(timeout=SERVER_FLUSH_INTERVAL_S):
            ps.flush()
    finally:
        ps.flush()
    ps.stop()
    server.stop(grace=2.0).wait()
    ps.flush()
    control.send("done", rpcs=ps.rpcs)
    return 0


def _heartbeat(worker: Any, control: Control) -> None:
    """Report RPCs completed and in flight while they change (the launcher's stall watchdog)."""
    last = None
    while True:
        time.sleep(HEARTBEAT_INTERVAL_S)
        now = (worker.client.completed, worker.client.issued)
        if now != last:
            control.send("rpcs", completed=now[0], in_flight=now[1] - now[0], iteration=worker.iteration)
            last = now


def run_worker(spec: dict, control: Control) -> int:
    """Wait for the server addresses and ``start``, train, write the logs; 0 on success."""
    import torch  # noqa: F401  (load before the start signal, not inside the timed run)

    from ddlscope.pstrain.compute import loss_and_gradients  # noqa: F401
    from ddlscope.pstrain.worker import Worker

    cfg = spec["config"]
    line = _read_line()
    if line is None:
        return 1
    servers = json.loads(line)
    worker = Worker(cfg, servers["addresses"], servers["hosts"])
    _final_flushes.append(lambda: worker.flush(final=True))
    control.send("ready", pid=os.getpid())
    if _read_line() != "start":
        return 1
    threading.Thread(target=_watch_stdin, name="stdin-watch", daemon=True).start()
    threading.Thread(target=_heartbeat, args=(worker, control), name="heartbeat", daemon=True).start()

    def report(iterations: int, loss: float, rpcs: int) -> None:
        control.send("progress", iterations=iterations, loss=loss, rpcs=rpcs)

    try:
        worker.run(report)
    finally:
        worker.flush()  # keep what was logged, before anything that might block on a broken connection
    worker.close()
    control.send("done", rpcs=worker.client.completed, iterations=cfg.iterations)
    return 0


def main(argv: list[str] | None = None) -> None:
    """Run one process of a ps-train run and exit with its status (0: done, 1: failed, 143: SIGTERM)."""
    parser = argparse.ArgumentParser(prog="python -m ddlscope.pstrain.node")
    parser.add_argument("role", choices=("worker", "server"))
    parser.add_argument("id", type=int)
    parser.add_argument("spec", type=Path, help="pickled process spec written by the launcher")
    args = parser.parse_args(argv)
    _take_sigterm()  # first: every thread started from here on inherits the blocked SIGTERM
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles Ctrl-C
    control = _take_control_stream()
    _die_with_parent()
    spec = pickle.loads(args.spec.read_bytes())
    name = f"{args.role} {args.id}"
    try:
        status = run_server(spec, control) if args.role == "server" else run_worker(spec, control)
    except BaseException as exc:
        message = str(exc) or type(exc).__name__
        if not message.startswith(name):
            message = f"{name}: {message}"
        control.send("error", message=message)
        traceback.print_exc()
        print(f"error: {message}", file=sys.stderr)
        status = 1
    # leave without interpreter shutdown: gRPC's threads must not keep a stopped process alive
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
