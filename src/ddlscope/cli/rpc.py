"""``ddlscope rpc ...``: the parameter-server RPC commands (dissect, skew, offload).

Sub-command modules each define ``register(rpc_app)`` and are listed in :data:`RPC_COMMAND_MODULES`.
"""

from __future__ import annotations

import importlib

import typer

RPC_COMMAND_MODULES: tuple[str, ...] = ("ddlscope.cli.rpc_dissect", "ddlscope.cli.rpc_skew")


def register(app: typer.Typer) -> None:
    """Add the ``rpc`` command group to ``app``."""
    rpc_app = typer.Typer(
        help="Parameter-server RPC latency: dissect logs into stages, update skew, in-network offload.",
        no_args_is_help=True,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    for name in RPC_COMMAND_MODULES:
        importlib.import_module(name).register(rpc_app)
    app.add_typer(rpc_app, name="rpc")
