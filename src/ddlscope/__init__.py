"""ddlscope: where a distributed training step's time goes, what a change would buy, and why
parameter-server RPCs are slow. See README.md and docs/ (docs/api.md: the Python API).

The Python API of every command (:mod:`ddlscope.api`) is reachable from here, loaded on first use
so ``import ddlscope`` stays cheap: ``ddlscope.characterize``, ``trace``, ``predict`` and
``whatif`` are its functions; ``ddlscope.calibrate``, ``validate`` and ``profile`` are the
packages of those commands, callable as their function (:mod:`ddlscope._callable`); the RPC
analyses are :mod:`ddlscope.rpc`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("ddlscope")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

_API = ("characterize", "trace", "predict", "whatif", "rpc_dissect", "CharacterizeResult", "TraceResult",
        "CalibrateResult", "ValidateResult", "RpcDissectResult")
_COMMAND_PACKAGES = ("calibrate", "validate", "profile")


def __getattr__(name: str) -> Any:
    if name in _API:
        from ddlscope import api

        return getattr(api, name)
    if name in _COMMAND_PACKAGES:  # the callable package (importing it makes it this module's attribute)
        import importlib

        return importlib.import_module(f"ddlscope.{name}")
    raise AttributeError(f"module 'ddlscope' has no attribute {name!r}")


__all__ = ["__version__", *_API, *_COMMAND_PACKAGES]
