"""The Architecture spec: how a training job is placed (the *execution* input of the model).

The training architectures and their rules are the one table of :mod:`ddlscope.specs.traits`
(:data:`~ddlscope.specs.traits.TRAITS`); the traffic each one causes is in
:mod:`ddlscope.model.step_time` and :mod:`ddlscope.model.arch_costs`. The six of the PAI study
(IISWC 2019) are a reconstruction (the study's text is not available to us: the placements are the
standard ones those names denote); ``fsdp`` is sharded data parallelism (PyTorch FSDP / ZeRO).

=====================  =================================================================
``1w1g``               one worker, one GPU
``1wng``               one worker, n GPUs of one server, parameters held on the host
``ps_worker``          N workers x g GPUs, P parameter-server shards, across servers
``allreduce_local``    n GPUs of one server, ring all-reduce over NVLink (PCIe if none)
``allreduce_cluster``  m servers x g GPUs, hierarchical all-reduce
``pearl``              embeddings partitioned over the GPUs (all-to-all), dense all-reduced
``fsdp``               n GPUs on m servers, parameters/gradients/optimizer state sharded
=====================  =================================================================
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from ddlscope.specs.base import SPEC_CONFIG
from ddlscope.specs.traits import ARCHITECTURES, SHARDINGS, canonical_sharding, single_server_kinds, traits_of

ArchitectureKind = Literal["1w1g", "1wng", "ps_worker", "allreduce_local", "allreduce_cluster", "pearl", "fsdp", "3d"]
"""The names of :data:`ARCHITECTURES` as a type (a test checks they are the same)."""
Sharding = Literal["zero1", "zero2", "zero3", "hybrid"]
"""The names of :data:`~ddlscope.specs.traits.SHARDINGS` as a type."""
SINGLE_SERVER_ARCHITECTURES: frozenset[str] = frozenset(single_server_kinds())
__all__ = ["ARCHITECTURES", "SHARDINGS", "SINGLE_SERVER_ARCHITECTURES", "Architecture", "ArchitectureKind",
           "Sharding"]


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
    - ``sharding``: ``fsdp`` only: ``zero1``, ``zero2`` (``SHARD_GRAD_OP``), ``zero3``
      (``FULL_SHARD``, the default when ``None``) or ``hybrid`` (``HYBRID_SHARD``); FSDP's names
      are accepted in any case.
    - ``tp``, ``pp``, ``cp``, ``virtual_stages``, ``microbatches``: ``3d`` only (1 elsewhere):
      tensor-parallel GPUs (within a server), pipeline stages, context-parallel GPUs (the sequence
      split, keys/values passed round a ring), virtual stages per GPU (the interleaved schedule,
      ``microbatches`` a multiple of ``pp``), micro-batches per step; ``tp x cp x pp`` divides the
      GPUs and ``dp = num_gpus / (tp x cp x pp)``.
    - ``ep``: ``3d`` only (1 elsewhere): expert-parallel GPUs, taken from the data-parallel group
      (``ep`` divides ``dp``); each mixture-of-experts layer's experts split over them. The
      workload's experts must divide by ``ep`` too (checked where both meet,
      :func:`ddlscope.model.jobs.job_row`).

    Derived: ``num_gpus = num_workers * gpus_per_worker`` (data-parallel replicas).

    Raises:
        pydantic.ValidationError: counts that the kind does not allow (``1w1g`` with more than one
            GPU, ``ps_worker`` without shards, a single-server kind on several servers, GPUs that
            do not divide evenly over the servers of an all-reduce job, a sharding for a kind other
            than ``fsdp``, ...), naming the field; an unknown ``kind`` or sharding.
    """

    model_config = SPEC_CONFIG

    kind: ArchitectureKind
    num_workers: int = Field(strict=True, default=1, ge=1, description="worker processes")
    gpus_per_worker: int = Field(strict=True, default=1, ge=1, description="GPUs per worker")
    num_ps: int = Field(strict=True, default=0, ge=0, description="parameter-server shards")
    num_servers: int | None = Field(None, ge=1, description="servers holding the GPUs")
    sharding: Sharding | None = Field(None, description="fsdp: zero1 | zero2 | zero3 | hybrid (default zero3)")
    tp: int = Field(strict=True, default=1, ge=1, description="3d: tensor-parallel GPUs")
    pp: int = Field(strict=True, default=1, ge=1, description="3d: pipeline stages")
    virtual_stages: int = Field(strict=True, default=1, ge=1, description="3d: virtual stages (interleaved)")
    microbatches: int = Field(strict=True, default=1, ge=1, description="3d: micro-batches per step")
    cp: int = Field(strict=True, default=1, ge=1, description="3d: context-parallel GPUs (sequence split)")
    ep: int = Field(strict=True, default=1, ge=1, description="3d: expert-parallel GPUs (of the dp group)")

    @field_validator("sharding", mode="before")
    @classmethod
    def _sharding_name(cls, v: object) -> object:
        """Accept FSDP's ``ShardingStrategy`` names (``FULL_SHARD`` -> ``zero3``, any case)."""
        return None if v is None else canonical_sharding(str(v))

    @property
    def num_gpus(self) -> int:
        """Total GPUs (= data-parallel replicas) of the job."""
        return self.num_workers * self.gpus_per_worker

    @model_validator(mode="after")
    def _counts_fit_kind(self) -> Architecture:
        k, n = self.kind, self.num_gpus
        t = traits_of(k)
        if not t.parameter_servers and self.num_ps != 0:
            raise ValueError(f"num_ps: expected 0 for {k} (only ps_worker has PS shards), got {self.num_ps}")
        if t.one_worker and t.max_gpus == 1 and (self.num_workers != 1 or self.gpus_per_worker != 1):
            raise ValueError(
                f"num_workers/gpus_per_worker: {k} is one worker with one GPU, got "
                f"{self.num_workers} worker(s) x {self.gpus_per_worker} GPU(s)"
            )
        if t.one_worker and t.max_gpus != 1:
            if self.num_workers != 1:
                raise ValueError(f"num_workers: {k} has exactly one worker, got {self.num_workers}")
            if self.gpus_per_worker < t.min_gpus:
                raise ValueError(f"gpus_per_worker: {k} expects >= {t.min_gpus} GPUs, got {self.gpus_per_worker} "
                                 "(use 1w1g)")
        if t.parameter_servers and self.num_ps < 1:
            raise ValueError(f"num_ps: {k} expects >= 1 parameter-server shard, got 0")
        if not t.one_worker and n < t.min_gpus:
            raise ValueError(f"num_workers/gpus_per_worker: {k} expects >= {t.min_gpus} GPUs in all, got {n}")
        if t.single_server and self.num_servers not in (None, 1):
            raise ValueError(f"num_servers: {k} runs on one server, got {self.num_servers}")
        if self.num_servers is not None and self.num_servers < t.min_servers:
            raise ValueError(
                f"num_servers: {k} expects >= {t.min_servers} servers, got {self.num_servers} (use allreduce_local)"
            )
        if self.sharding is not None and not t.sharded:
            raise ValueError(f"sharding: only fsdp shards its state, got sharding={self.sharding!r} for {k}")
        mp = {"tp": self.tp, "pp": self.pp, "cp": self.cp, "virtual_stages": self.virtual_stages,
              "microbatches": self.microbatches}
        if self.ep != 1:
            mp["ep"] = self.ep
        if not t.model_parallel and any(v != 1 for v in mp.values()):
            raise ValueError(f"tp/pp/cp/ep/virtual_stages/microbatches: only 3d is model-parallel, got {mp} for {k}")
        if t.model_parallel:
            if n % (self.tp * self.pp * self.cp):
                what = "tp x pp" if self.cp == 1 else "tp x cp x pp"
                raise ValueError(f"{what.replace(' x ', '/')}: {k} expects {what} = {self.tp * self.pp * self.cp} "
                                 f"to divide the {n} GPUs")
            dp = n // (self.tp * self.pp * self.cp)
            if dp % self.ep:
                raise ValueError(f"ep: the expert-parallel GPUs are taken from the data-parallel group; expected ep "
                                 f"to divide dp = {dp} ({n} GPUs / (tp x cp x pp)), got ep={self.ep}")
            if self.virtual_stages > 1 and (self.pp < 2 or self.microbatches % self.pp):
                raise ValueError(f"virtual_stages: the interleaved schedule expects pp >= 2 and microbatches a "
                                 f"multiple of pp, got pp={self.pp}, microbatches={self.microbatches}")
        if self.num_servers is not None:
            if self.num_servers > n:
                raise ValueError(f"num_servers: {self.num_servers} servers for {n} GPUs leaves servers empty")
            if t.even_split and n % self.num_servers != 0:
                raise ValueError(
                    f"num_servers: {k} expects the {n} GPUs to divide evenly over the servers, "
                    f"got {self.num_servers} servers"
                )
        return self

    def servers_on(self, gpus_per_server: int) -> int:
        """Servers the job occupies on servers of ``gpus_per_server`` GPUs.

        ``num_servers`` when given, else ``ceil(num_gpus / gpus_per_server)`` (one for the
        single-server kinds; at least the kind's ``min_servers``). Where the kind's traits say
        ``even_split`` (``allreduce_cluster``, ``pearl``, ``fsdp``) the GPUs must divide evenly.

        Raises:
            ValueError: the job does not fit its placement: more GPUs per server than the server
                has, a single-server kind larger than one server, or an uneven split.
        """
        n = self.num_gpus
        t = traits_of(self.kind)
        if self.tp > gpus_per_server:
            raise ValueError(f"tp: the {self.tp} tensor-parallel GPUs must sit in one server, which has "
                             f"{gpus_per_server}; expected tp <= {gpus_per_server}")
        if self.gpus_per_worker > gpus_per_server:
            raise ValueError(
                f"gpus_per_worker: a worker's {self.gpus_per_worker} GPUs must sit in one server, which has "
                f"{gpus_per_server}; expected at most {gpus_per_server} GPUs per worker"
            )
        if t.single_server:
            m = 1
        elif self.num_servers is not None:
            m = self.num_servers
        else:
            # whole workers per server
            m = max(1, math.ceil(self.num_workers / (gpus_per_server // self.gpus_per_worker)))
            m = max(m, t.min_servers)
            if t.even_split:
                while n % m and m < n:  # smallest even split that fits
                    m += 1
        per_server = math.ceil(n / m)
        if per_server > gpus_per_server:
            raise ValueError(
                f"architecture: {self.kind} with {n} GPUs puts {per_server} GPUs on a server that has "
                f"{gpus_per_server}; expected at most {gpus_per_server} GPUs per server"
                + (" (a single-server architecture)" if t.single_server else
                   f" (num_servers >= {math.ceil(n / gpus_per_server)})")
            )
        if t.even_split and n % m:
            raise ValueError(f"num_servers: {n} GPUs do not divide evenly over {m} servers")
        return m
