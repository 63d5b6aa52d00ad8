"""Where the streaming analyses run their pieces: in this process or as Ray tasks.

``--engine local`` runs the partitions (``rpc dissect --streaming``) or the chunks of jobs
(``characterize --streaming``) one after another in this process; ``--engine ray`` runs each as a
Ray task, on a local cluster started here or on an existing one (``--address``). Ray is an optional
extra (``pip install 'ddlscope[ray]'``). This module imports nothing of ddlscope, so that every
analysis (``rpc``, ``population``) can use it without importing another.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ENGINES: tuple[str, ...] = ("local", "ray")
"""``--engine`` values."""
RAY_INSTALL = "pip install 'ddlscope[ray]'"
"""How to install the optional Ray extra (named by :class:`MissingExtraError`)."""


class MissingExtraError(ImportError):
    """An optional dependency of ddlscope is not installed; the message names the ``pip install``
    command (the command line shows it as an error message, exit code 2, without a traceback)."""


def check_engine(engine: str, what: str = "engine") -> None:
    """Raise if ``engine`` is not one of :data:`ENGINES`.

    Args:
        engine: the value given.
        what: the name of the argument or option in the message (``--engine`` for the CLI).

    Raises:
        ValueError: ``engine: expected one of local, ray, got 'x'``.
    """
    if engine not in ENGINES:
        raise ValueError(f"{what}: expected one of {', '.join(ENGINES)}, got {engine!r}")


def ray_available() -> bool:
    """Whether Ray can be imported (``pip install 'ddlscope[ray]'``)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def require_ray() -> Any:
    """The ``ray`` module.

    Raises:
        MissingExtraError: Ray is not installed (an ImportError whose message says
            ``--engine ray needs Ray: pip install 'ddlscope[ray]'``).
    """
    try:
        import ray
    except ImportError as e:
        raise MissingExtraError(f"--engine ray needs Ray: {RAY_INSTALL}") from e
    return ray


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[Any]:
    """Ray connected for a streaming analysis.

    Args:
        address: an existing cluster's address (``ray start --head`` prints it; ``auto`` finds one
            running on this machine); None: a new local cluster of ``num_cpus`` workers is started
            here (``ray.init(address="local")``: never one that ``ray start`` left running, nor
            ``RAY_ADDRESS``'s) and shut down on exit, whose tasks import this ddlscope (its ``src``
            folder put first on the workers' ``PYTHONPATH``). If Ray is already initialised in this process, that
            session is used as it is (and left running).
        num_cpus: CPUs of a local cluster (None: every core); ignored with ``address``.

    Yields:
        The ``ray`` module, initialised.

    Raises:
        MissingExtraError: Ray is not installed (the message says how to install it).
    """
    ray = require_ray()
    started = False
    if not ray.is_initialized():
        src = str(Path(__file__).resolve().parents[1])
        env = {"PYTHONPATH": os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])}
        kwargs: dict[str, Any] = {"runtime_env": {"env_vars": env}, "log_to_driver": False,
                                  "include_dashboard": False} if address is None else {}
        # "local": a new cluster even where `ray start` left one running (or its address file behind)
        ray.init(address="local" if address is None else address, num_cpus=num_cpus if address is None else None,
                 **kwargs)
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def ray_cpus(ray: Any) -> int:
    """CPUs of the connected Ray cluster.

    Args:
        ray: the ``ray`` module, initialised (:func:`ray_session`).

    Returns:
        The cluster's ``CPU`` resource, at least 1 (tasks of one CPU each run this many at a time).
    """
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def unwrap_task_error(ray: Any, exc: BaseException) -> BaseException:
    """The exception a Ray task raised, out of Ray's wrapper, so that a user error inside a task (a
    ValueError of the analysis) reads as it does with the local engine.

    Args:
        ray: the ``ray`` module.
        exc: what ``ray.get`` raised.

    Returns:
        ``exc.cause`` for a ``ray.exceptions.RayTaskError`` whose cause is an Exception; else ``exc``
        itself (a lost worker, an interrupt).
    """
    cause = getattr(exc, "cause", None) if isinstance(exc, ray.exceptions.RayTaskError) else None
    return cause if isinstance(cause, Exception) else exc
