"""The ``ddlscope`` console entry point: one typer app, commands registered from their modules.

Command modules each define ``register(app)``; add a new one to :data:`COMMAND_MODULES`.
"""

from __future__ import annotations

import importlib
import sys

try:
    import typer
except KeyboardInterrupt:  # Ctrl-C while the CLI loads: one line, not a traceback from inside an import
    sys.stderr.write("interrupted\n")
    raise SystemExit(130) from None

app = typer.Typer(
    name="ddlscope",
    help="Where a distributed training step's time goes, what a change would buy, "
    "and why parameter-server RPCs are slow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES: tuple[str, ...] = (
    "ddlscope.cli.characterize",
    "ddlscope.cli.model",
    "ddlscope.cli.catalog",
    "ddlscope.cli.ingest",
    "ddlscope.cli.profile",
    "ddlscope.cli.rpc",
    "ddlscope.cli.pstrain",
    "ddlscope.cli.trace",
    "ddlscope.cli.calibrate",
    "ddlscope.cli.validate",
    "ddlscope.cli.plan",
)

try:
    for _name in COMMAND_MODULES:
        importlib.import_module(_name).register(app)
except KeyboardInterrupt:  # Ctrl-C while the commands load (scipy, matplotlib, ...): one line, exit 130
    sys.stderr.write("interrupted\n")
    raise SystemExit(130) from None


def main() -> None:
    """Run the CLI (``python -m ddlscope``)."""
    app()
