"""Subpackages that are also the API function of their command.

``ddlscope.calibrate``, ``ddlscope.validate`` and ``ddlscope.profile`` are packages; importing one
sets it as the attribute of ``ddlscope`` of that name, so a plain function ``ddlscope.calibrate``
would be replaced by the package the first time anything imports from it. Instead the package
module itself is made callable (Python's documented way to customise a module: assigning a
:class:`types.ModuleType` subclass to its ``__class__``): ``ddlscope.calibrate(...)`` runs
:func:`ddlscope.api.calibrate`, and ``ddlscope.calibrate.api`` stays the package's module.
"""

from __future__ import annotations

import sys
import types
from typing import Any


def make_callable(module_name: str, api_name: str) -> None:
    """Make the module ``module_name`` callable as :mod:`ddlscope.api`'s ``api_name`` (its
    docstring is the function's, appended to the module's)."""

    class _CommandModule(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            from ddlscope import api

            return getattr(api, api_name)(*args, **kwargs)

    _CommandModule.__name__ = f"CommandModule[{api_name}]"
    sys.modules[module_name].__class__ = _CommandModule
