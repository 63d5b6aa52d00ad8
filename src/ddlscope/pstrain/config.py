"""The configuration of a ``ddlscope ps-train`` run (validated; every field has a default)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_TEXT = Path("text") / "tinyshakespeare.txt"
DEFAULT_CTR = Path("criteo") / "criteo_sample.txt"


def find_shared_data() -> Path | None:
    """The folder of bundled public data: ``$DDLSCOPE_SHARED_DATA``, else the nearest ``shared/data``
    above the working directory or above this package; None when there is none."""
    if env := os.environ.get("DDLSCOPE_SHARED_DATA"):
        return Path(env)
    for base in (Path.cwd(), Path(__file__).resolve()):
        for parent in (base, *base.parents):
            candidate = parent / "shared" / "data"
            if candidate.is_dir():
                return candidate
    return None


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
    when it receives its ``at``-th RPC (to check failure handling)."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["worker", "server"]
    id: int = Field(ge=0)
    at: int = Field(ge=0)

    @classmethod
    def parse(cls, text: str) -> FailureInjection:
        """``role:id:at``, e.g. ``worker:1:5`` or ``server:0:100``.

        Raises:
            ValueError: another shape.
        """
        parts = text.split(":")
        if len(parts) != 3 or parts[0] not in ("worker", "server"):
            raise ValueError(f"--inject-failure {text!r}: expected worker:ID:ITERATION or server:ID:RPCS")
        try:
            return cls(role=parts[0], id=int(parts[1]), at=int(parts[2]))  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(f"--inject-failure {text!r}: ID and count must be integers") from exc


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
        server_threads: gRPC handler threads per server (None: enough for every in-flight RPC).
        rpc_timeout_s, connect_timeout_s, startup_timeout_s: deadlines.
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
        if self.inject_failure is not None:
            limit = self.workers if self.inject_failure.role == "worker" else self.servers
            if self.inject_failure.id >= limit:
                raise ValueError(f"inject_failure: {self.inject_failure.role} {self.inject_failure.id} does not "
                                 f"exist ({limit} {self.inject_failure.role}s)")
        return self

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
        """The input file: ``data``, or the bundled default for the model.

        Raises:
            FileNotFoundError: no ``data`` given and no bundled data found, or the file is missing.
        """
        if self.data is not None:
            if not self.data.is_file():
                raise FileNotFoundError(f"--data {self.data}: no such file")
            return self.data
        shared = find_shared_data()
        rel = DEFAULT_TEXT if self.model == "word" else DEFAULT_CTR
        if shared is None or not (shared / rel).is_file():
            raise FileNotFoundError(
                f"no --data given and the default {rel} was not found (looked in $DDLSCOPE_SHARED_DATA and "
                f"shared/data above the working directory); pass --data FILE"
            )
        return shared / rel
