"""The configuration of a ``ddlscope ps-train`` run (validated; every field has a default)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ddlscope.shared_data import SEARCHED, find_shared_data

DEFAULT_TEXT = Path("text") / "tinyshakespeare.txt"
DEFAULT_CTR = Path("criteo") / "criteo_sample.txt"


class NetemConfig(BaseModel):
    """Network emulation: every process on its own network namespace ("host"), all hosts on one
    emulated switch; each host's link shaped as below (docs/pstrain.md, "Network emulation").

    Attributes:
        enabled: put processes in namespaces (also without shaping).
        bandwidth_mbit: each host's link rate in Mbit/s, each direction (None: unshaped).
        delay_ms: one-way delay added at each host's egress, ms (host-to-host RTT = 2 x delay).
        loss_pct: packet loss at each host's egress, percent.
    """

    model_config = ConfigDict(extra="forbid")
    enabled: bool = False
    bandwidth_mbit: float | None = Field(default=None, gt=0)
    delay_ms: float | None = Field(default=None, ge=0)
    loss_pct: float | None = Field(default=None, ge=0, le=100)

    @property
    def shaping(self) -> bool:
        """Whether any of bandwidth, delay or loss is set."""
        return any(v is not None for v in (self.bandwidth_mbit, self.delay_ms, self.loss_pct))


class FailureInjection(BaseModel):
    """Kill one process with SIGKILL: worker ``id`` when it starts iteration ``at``, or server ``id``
    when it receives its ``at``-th RPC (to check failure handling). With ``signal`` ``"STOP"`` the
    process is frozen with SIGSTOP instead (to check the stall watchdog)."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["worker", "server"]
    id: int = Field(ge=0)
    at: int = Field(ge=0)
    signal: Literal["KILL", "STOP"] = "KILL"

    def __str__(self) -> str:
        return f"{self.role}:{self.id}:{self.at}" + (":stop" if self.signal == "STOP" else "")

    @classmethod
    def parse(cls, text: str) -> FailureInjection:
        """``role:id:at[:stop]``, e.g. ``worker:1:5``, ``server:0:100`` or ``server:0:100:stop``.

        Raises:
            ValueError: another shape, or an id or count that is not a whole number >= 0 (the
                message names the option and the part).
        """
        usage = "expected worker:ID:ITERATION or server:ID:RPCS, optionally followed by :stop"
        parts = text.split(":")
        if len(parts) not in (3, 4) or parts[0] not in ("worker", "server") or parts[3:] not in ([], ["stop"]):
            raise ValueError(f"--inject-failure {text!r}: {usage}")
        values = []
        for what, part in (("ID", parts[1]), ("ITERATION" if parts[0] == "worker" else "RPCS", parts[2])):
            try:
                value = int(part)
            except ValueError:
                raise ValueError(f"--inject-failure {text!r}: {what} must be a whole number, got {part!r}") from None
            if value < 0:
                raise ValueError(f"--inject-failure {text!r}: {what} must be 0 or more, got {value}")
            values.append(value)
        return cls(role=parts[0], id=values[0], at=values[1],  # type: ignore[arg-type]
                   signal="STOP" if parts[3:] else "KILL")


def min_server_threads(mode: str, model: str, workers: int, connections: str, max_connections: int | None) -> int:
    """The fewest gRPC handler threads per server with which a run cannot deadlock.

    Async mode: 1 (no request waits). Sync mode: a request of iteration ``t + 1`` waits in its
    handler thread until the shard has applied iteration ``t`` (the version check), which needs the
    pushes of ``t`` of every worker, and each of those needs a free thread. A worker is at most one
    iteration ahead of a shard (it finishes ``t`` only once every shard acknowledged its pushes of
    ``t``), and it sends a shard at most ``tables + 1`` requests at once (a ``pull_sparse`` or
    ``push_sparse`` per table plus one dense request; fewer with ``--connections per-rpc`` and
    ``--max-connections K``: at most K in flight per worker). At most ``N - 1`` workers can wait at
    a shard (if all N had sent their pushes, it would have moved on), so the shard needs
    ``(N - 1) * min(tables + 1, K) + 1`` threads: all the waiting requests plus one to serve the
    worker they wait for (derived here from the sync protocol; docs/pstrain.md, "Modes").

    Args:
        mode: ``sync`` or ``async``; model: ``word`` (2 tables) or ``ctr`` (1 table); workers: N;
        connections, max_connections: the connection policy.
    """
    if mode != "sync":
        return 1
    return (workers - 1) * requests_per_shard(model, connections, max_connections) + 1


def requests_per_shard(model: str, connections: str, max_connections: int | None) -> int:
    """The most requests one worker has in flight at one server: ``tables + 1`` (word: 2 tables,
    ctr: 1), at most ``max_connections`` with ``--connections per-rpc``."""
    n = (2 if model == "word" else 1) + 1
    return min(n, max_connections) if connections == "per-rpc" and max_connections is not None else n


class RunConfig(BaseModel):
    """A parameter-server training run.

    Attributes (units in names; see docs/pstrain.md for each):
        model: ``word`` (text) or ``ctr`` (Criteo/Avazu samples); data: the input file (None:
            the bundled tinyshakespeare text or Criteo sample).
        workers, servers: N worker and M server processes.
        mode: ``sync`` (per-iteration version check at the servers) or ``async``.
        iterations: iterations per worker; batch_size: samples per worker per iteration.
        optimizer, lr: server-side optimizer (``adagrad`` or ``sgd``) and learning rate.
        dim, hidden: embedding dimension and MLP hidden width.
        window, negatives: context words and negative samples (word model).
        rows: hash buckets of the CTR embedding table.
        connections, max_connections: ``persistent`` or ``per-rpc``; at most this many open
            connections per worker (None: no limit).
        server_threads: gRPC handler threads per server (None: enough for every in-flight RPC;
            at least :func:`min_server_threads`).
        rpc_timeout_s, connect_timeout_s, startup_timeout_s: deadlines.
        stall_timeout_s: the run fails when RPCs are in flight but none completes for this long
            (the stall watchdog).
        out: output folder; log_format: ``parquet``, ``csv`` or ``jsonl``; otlp: also write
            OpenTelemetry spans; log_keys: keep each sparse RPC's keys; keep_raw: keep per-process
            part files.
        netem: network emulation; inject_failure: failure injection (tests).
        seed: seed of initial values, data order and negative samples.
    """

    model_config = ConfigDict(extra="forbid")
    model: Literal["word", "ctr"] = "word"
    data: Path | None = None
    workers: int = Field(default=2, ge=1, le=200)
    servers: int = Field(default=2, ge=1, le=200)
    mode: Literal["sync", "async"] = "sync"
    iterations: int = Field(default=1000, ge=1)
    batch_size: int | None = Field(default=None, ge=1)
    optimizer: Literal["adagrad", "sgd"] = "adagrad"
    lr: float | None = Field(default=None, gt=0)
    dim: int | None = Field(default=None, ge=1)
    hidden: int = Field(default=64, ge=1)
    window: int = Field(default=4, ge=1)
    negatives: int = Field(default=5, ge=1)
    rows: int = Field(default=1 << 16, ge=1)
    connections: Literal["persistent", "per-rpc"] = "persistent"
    max_connections: int | None = Field(default=None, ge=1)
    server_threads: int | None = Field(default=None, ge=1)
    rpc_timeout_s: float = Field(default=120.0, gt=0)
    connect_timeout_s: float = Field(default=30.0, gt=0)
    startup_timeout_s: float = Field(default=120.0, gt=0)
    stall_timeout_s: float = Field(default=60.0, gt=0)
    out: Path = Path("ddlscope-ps-train")
    log_format: Literal["parquet", "csv", "jsonl"] = "parquet"
    otlp: bool = False
    log_keys: bool = True
    keep_raw: bool = False
    netem: NetemConfig = Field(default_factory=NetemConfig)
    inject_failure: FailureInjection | None = None
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        # messages name the command-line options: that is how most runs are configured
        inj = self.inject_failure
        if inj is not None:
            limit = self.workers if inj.role == "worker" else self.servers
            if inj.id >= limit:
                raise ValueError(f"--inject-failure {inj}: there is no {inj.role} {inj.id} (--{inj.role}s {limit}: "
                                 f"ids 0 to {limit - 1})")
            if inj.role == "worker" and inj.at >= self.iterations:
                raise ValueError(f"--inject-failure {inj}: worker {inj.id} never starts iteration {inj.at} "
                                 f"(--iterations {self.iterations}: iterations 0 to {self.iterations - 1})")
        need = self.required_server_threads
        if self.server_threads is not None and self.server_threads < need:
            per = requests_per_shard(self.model, self.connections, self.max_connections)
            raise ValueError(
                f"--server-threads {self.server_threads}: a sync run of {self.workers} workers needs at least "
                f"{need} handler threads per server or it can deadlock ({self.workers - 1} of the {self.workers} "
                f"workers can each have {per} requests waiting at a server's version check, and 1 more thread "
                f"must serve the worker they wait for); "
                f"use --server-threads {need} or more, or --mode async")
        return self

    @property
    def required_server_threads(self) -> int:
        """The fewest handler threads per server this run needs (:func:`min_server_threads`)."""
        return min_server_threads(self.mode, self.model, self.workers, self.connections, self.max_connections)

    @property
    def effective_server_threads(self) -> int:
        """``server_threads``, or enough for every RPC the workers can have in flight at one server:
        ``N x (tables + 1) + 4``."""
        return self.server_threads or self.workers * requests_per_shard(self.model, "persistent", None) + 4

    @property
    def effective_batch_size(self) -> int:
        """``batch_size``, or the model's default (word: 256, ctr: 32)."""
        return self.batch_size or (256 if self.model == "word" else 32)

    @property
    def effective_lr(self) -> float:
        """``lr``, or the default (adagrad: 0.2, sgd: 0.5 for word / 0.05 for ctr)."""
        if self.lr is not None:
            return self.lr
        if self.optimizer == "adagrad":
            return 0.2
        return 0.5 if self.model == "word" else 0.05

    @property
    def effective_dim(self) -> int:
        """``dim``, or the model's default (word: 32, ctr: 8)."""
        return self.dim or (32 if self.model == "word" else 8)

    def data_path(self) -> Path:
        """The input file: ``data``, or the default for the model (``text/tinyshakespeare.txt`` or
        ``criteo/criteo_sample.txt`` in the shared data folder, see :func:`ddlscope.shared_data.find_shared_data`).

        Raises:
            FileNotFoundError: ``data`` is missing, or not given and the default is not found.
            IsADirectoryError: ``data`` is a folder.
        """
        if self.data is not None:
            if self.data.is_dir():
                raise IsADirectoryError(f"--data {self.data}: is a folder; expected a file")
            if not self.data.is_file():
                raise FileNotFoundError(f"--data {self.data}: no such file")
            return self.data
        shared = find_shared_data()
        rel = DEFAULT_TEXT if self.model == "word" else DEFAULT_CTR
        if shared is None or not (shared / rel).is_file():
            where = f"looked in {shared}" if shared is not None else "no shared/data folder found"
            raise FileNotFoundError(
                f"no --data given and the default data file {rel} was not found ({where}; the default is "
                f"searched in {SEARCHED}); pass --data FILE or set DDLSCOPE_SHARED_DATA"
            )
        return shared / rel
