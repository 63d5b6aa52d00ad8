"""PyTorch model -> Workload: trace one training step on the meta device (op table + totals).

Public API: :func:`profile_model` returning a :class:`ProfileResult` (``.ops``, ``.params``,
``.totals``, ``.workload``), :class:`ProfileError`, and the model zoo
:data:`ddlscope.profile.zoo.ZOO`. See ``docs/profile.md``.
"""

from ddlscope.profile.api import (
    OP_COLUMNS,
    PARAM_COLUMNS,
    ProfileError,
    ProfileResult,
    profile_model,
)
from ddlscope.profile.zoo import ZOO, ZooEntry

__all__ = ["OP_COLUMNS", "PARAM_COLUMNS", "ZOO", "ProfileError", "ProfileResult", "ZooEntry", "profile_model"]
