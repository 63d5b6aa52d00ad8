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

SIGTERM makes the child write its buffered log rows and exit with status 143.
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
import traceback
from pathlib import Path
from typing import Any, TextIO


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


def _on_sigterm(signum, frame) -> None:
    raise SystemExit(143)


def _read_line() -> str | None:
    line = sys.stdin.readline()
    return line.strip() if line else None


def _watch_stdin() -> None:
    """Exit at once when the launcher closes our input (it went away, or gives up on us)."""
    while (line := sys.stdin.readline()) and line.strip() != "stop":
        pass
    os._exit(1)


def run_server(spec: dict, control: Control) -> int:
    """Serve until ``stop`` or end of input, writing part files as rows pile up; 0 on success."""
    from ddlscope.pstrain.server import start_server

    cfg = spec["config"]
    ps, server, port = start_server(cfg, spec["bind"])
    control.send("ready", port=port, pid=os.getpid())
    stop = threading.Event()

    def read_stdin() -> None:
        while (line := _read_line()) is not None and line != "stop":
            pass
        stop.set()

    threading.Thread(target=read_stdin, name="stdin", daemon=True).start()
    try:
        while not stop.wait(timeout=1.0):
            if len(ps.rows) >= cfg.flush_rows:
                ps.flush()
    except BaseException:
        ps.flush()
        raise
    ps.stop()
    server.stop(grace=2.0).wait()
    ps.flush()
    control.send("done", rpcs=ps.rpcs)
    return 0


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
    control.send("ready", pid=os.getpid())
    if _read_line() != "start":
        return 1
    threading.Thread(target=_watch_stdin, name="stdin-watch", daemon=True).start()
    def report(iterations: int, loss: float, rpcs: int) -> None:
        control.send("progress", iterations=iterations, loss=loss, rpcs=rpcs)

    try:
        worker.run(report)
    except BaseException:
        worker.flush()  # keep what was logged, before anything that might block on a broken connection
        raise
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
    control = _take_control_stream()
    _die_with_parent()
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles Ctrl-C
    spec = pickle.loads(args.spec.read_bytes())
    name = f"{args.role} {args.id}"
    try:
        status = run_server(spec, control) if args.role == "server" else run_worker(spec, control)
    except SystemExit as exc:  # SIGTERM: the logs were flushed on the way out
        status = exc.code if isinstance(exc.code, int) else 1
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
