"""PyTorch model -> Workload: trace one training step on the meta device (op table + totals).

Public API: :func:`profile_model` returning a :class:`ProfileResult` (``.ops``, ``.params``,
``.totals``, ``.workload``), :class:`ProfileError`, and the model zoo
:data:`ddlscope.profile.zoo.ZOO`. See ``docs/profile.md``.

Calling the package, ``ddlscope.profile("resnet50", batch_size=64)``, runs :func:`profile_model`
(:mod:`ddlscope._callable`). The tracing API (and with it torch) is imported on first use, so
``ddlscope.profile.zoo`` (the zoo's names and defaults) stays cheap to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddlscope._callable import make_callable
from ddlscope.profile.zoo import ZOO, ZooEntry

make_callable(__name__, "profile")  # ddlscope.profile(model, ...) is profile_model(model, ...)

if TYPE_CHECKING:
    from ddlscope.profile.api import OP_COLUMNS, PARAM_COLUMNS, ProfileError, ProfileResult, profile_model

_API = ("OP_COLUMNS", "PARAM_COLUMNS", "ProfileError", "ProfileResult", "profile_model")


def __getattr__(name: str) -> Any:
    if name in _API:
        from ddlscope.profile import api

        return getattr(api, name)
    raise AttributeError(f"module 'ddlscope.profile' has no attribute {name!r}")


__all__ = ["OP_COLUMNS", "PARAM_COLUMNS", "ZOO", "ProfileError", "ProfileResult", "ZooEntry", "profile_model"]
