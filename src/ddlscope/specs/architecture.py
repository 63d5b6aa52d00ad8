"""The Architecture spec: how a training job is placed (the *execution* input of the model).

The six training architectures of the PAI study (IISWC 2019), names as the field uses them; the
traffic each one causes is in :mod:`ddlscope.model.step_time`. Reconstruction: the study's text is
not available to us, the placements below are the standard ones those names denote.

=====================  =================================================================
``1w1g``               one worker, one GPU
``1wng``               one worker, n GPUs of one server, parameters held on the host
``ps_worker``          N workers x g GPUs, P parameter-server shards, across servers
``allreduce_local``    n GPUs of one server, ring all-reduce over NVLink (PCIe if none)
``allreduce_cluster``  m servers x g GPUs, hierarchical all-reduce
``pearl``              embeddings partitioned over the GPUs (all-to-all), dense all-reduced
=====================  =================================================================
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from ddlscope.specs.base import SPEC_CONFIG

ArchitectureKind = Literal["1w1g", "1wng", "ps_worker", "allreduce_local", "allreduce_cluster", "pearl"]
ARCHITECTURES: tuple[str, ...] = (
    "1w1g",
    "1wng",
    "ps_worker",
    "allreduce_local",
    "allreduce_cluster",
    "pearl",
)
SINGLE_SERVER_ARCHITECTURES: frozenset[str] = frozenset({"1w1g", "1wng", "allreduce_local"})


class Architecture(BaseModel):
    """Placement of one job: which architecture and its counts.

    Fields:

    - ``kind``: one of :data:`ARCHITECTURES`.
    - ``num_workers``: worker processes (>= 1). For the all-reduce kinds and ``pearl`` use one
      worker per GPU, or one worker with ``gpus_per_worker`` GPUs; only the GPU total matters.
    - ``gpus_per_worker``: GPUs each worker drives (>= 1).
    - ``num_ps``: parameter-server shards; >= 1 for ``ps_worker``, 0 otherwise.
    - ``num_servers``: servers holding the job's GPUs; ``None`` means as few as the system's
      server fits (resolved by :meth:`servers_on`).

    Derived: ``num_gpus = num_workers * gpus_per_worker`` (data-parallel replicas).

    Raises:
        pydantic.ValidationError: counts that the kind does not allow (``1w1g`` with more than one
            GPU, ``ps_worker`` without shards, a single-server kind on several servers, GPUs that
            do not divide evenly over the servers of an all-reduce job, ...), naming the field.
    """

    model_config = SPEC_CONFIG

    kind: ArchitectureKind
    num_workers: int = Field(strict=True, default=1, ge=1, description="worker processes")
    gpus_per_worker: int = Field(strict=True, default=1, ge=1, description="GPUs per worker")
    num_ps: int = Field(strict=True, default=0, ge=0, description="parameter-server shards")
    num_servers: int | None = Field(None, ge=1, description="servers holding the GPUs")

    @property
    def num_gpus(self) -> int:
        """Total GPUs (= data-parallel replicas) of the job."""
        return self.num_workers * self.gpus_per_worker

    @model_validator(mode="after")
    def _counts_fit_kind(self) -> Architecture:
        k, n = self.kind, self.num_gpus
        if k != "ps_worker" and self.num_ps != 0:
            raise ValueError(f"num_ps: expected 0 for {k} (only ps_worker has PS shards), got {self.num_ps}")
        if k == "1w1g" and (self.num_workers != 1 or self.gpus_per_worker != 1):
            raise ValueError(
                f"num_workers/gpus_per_worker: 1w1g is one worker with one GPU, got "
                f"{self.num_workers} worker(s) x {self.gpus_per_worker} GPU(s)"
            )
        if k == "1wng":
            if self.num_workers != 1:
                raise ValueError(f"num_workers: 1wng has exactly one worker, got {self.num_workers}")
            if self.gpus_per_worker < 2:
                raise ValueError(f"gpus_per_worker: 1wng expects >= 2 GPUs, got {self.gpus_per_worker} (use 1w1g)")
        if k == "ps_worker" and self.num_ps < 1:
            raise ValueError("num_ps: ps_worker expects >= 1 parameter-server shard, got 0")
        if k in ("allreduce_local", "allreduce_cluster", "pearl") and n < 2:
            raise ValueError(f"num_workers/gpus_per_worker: {k} expects >= 2 GPUs in all, got {n}")
        if k in SINGLE_SERVER_ARCHITECTURES and self.num_servers not in (None, 1):
            raise ValueError(f"num_servers: {k} runs on one server, got {self.num_servers}")
        if k == "allreduce_cluster" and self.num_servers is not None and self.num_servers < 2:
            raise ValueError(
                f"num_servers: allreduce_cluster expects >= 2 servers, got {self.num_servers} (use allreduce_local)"
            )
        if self.num_servers is not None:
            if self.num_servers > n:
                raise ValueError(f"num_servers: {self.num_servers} servers for {n} GPUs leaves servers empty")
            if k in ("allreduce_cluster", "pearl") and n % self.num_servers != 0:
                raise ValueError(
                    f"num_servers: {k} expects the {n} GPUs to divide evenly over the servers, "
                    f"got {self.num_servers} servers"
                )
        return self

    def servers_on(self, gpus_per_server: int) -> int:
        """Servers the job occupies on servers of ``gpus_per_server`` GPUs.

        ``num_servers`` when given, else ``ceil(num_gpus / gpus_per_server)`` (one for the
        single-server kinds). For ``allreduce_cluster`` and ``pearl`` the GPUs must divide evenly.

        Raises:
            ValueError: the job does not fit its placement: more GPUs per server than the server
                has, a single-server kind larger than one server, or an uneven split.
        """
        n = self.num_gpus
        if self.gpus_per_worker > gpus_per_server:
            raise ValueError(
                f"gpus_per_worker: a worker's {self.gpus_per_worker} GPUs must sit in one server, which has "
                f"{gpus_per_server}; expected at most {gpus_per_server} GPUs per worker"
            )
        if self.kind in SINGLE_SERVER_ARCHITECTURES:
            m = 1
        elif self.num_servers is not None:
            m = self.num_servers
        else:
            # whole workers per server
            m = max(1, math.ceil(self.num_workers / (gpus_per_server // self.gpus_per_worker)))
            if self.kind == "allreduce_cluster":
                m = max(m, 2)
            if self.kind in ("allreduce_cluster", "pearl"):
                while n % m and m < n:  # smallest even split that fits
                    m += 1
        per_server = math.ceil(n / m)
        if per_server > gpus_per_server:
            raise ValueError(
                f"architecture: {self.kind} with {n} GPUs puts {per_server} GPUs on a server that has "
                f"{gpus_per_server}; expected at most {gpus_per_server} GPUs per server"
                + (" (a single-server architecture)" if self.kind in SINGLE_SERVER_ARCHITECTURES else
                   f" (num_servers >= {math.ceil(n / gpus_per_server)})")
            )
        if self.kind in ("allreduce_cluster", "pearl") and n % m:
            raise ValueError(f"num_servers: {n} GPUs do not divide evenly over {m} servers")
        return m
