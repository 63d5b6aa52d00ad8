"""The ``ddlscope`` console entry point: one typer app, commands registered from their modules.

Command modules each define ``register(app)``; add a new one to :data:`COMMAND_MODULES`.

Help is click's plain format (``rich_markup_mode=None``): paragraphs are re-wrapped to the terminal
(the rich format keeps a docstring's line breaks, so sentences broke mid-line), boolean flags read
``--figures / --no-figures``, and value types read as click names them (``PATH``, ``TEXT``,
``INTEGER``; :func:`_click_metavar`) instead of Python type names (``<list[Path]>``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import get_args

try:
    import click
    import typer
    import typer.core
except KeyboardInterrupt:  # Ctrl-C while the CLI loads: one line, not a traceback from inside an import
    sys.stderr.write("interrupted\n")
    raise SystemExit(130) from None


def _click_metavar(self: typer.core.TyperArgument | typer.core.TyperOption, ctx: click.Context) -> str:
    """The value type a help line shows, as click names it: ``PATH``, ``TEXT``, ``INTEGER``,
    ``FLOAT``, a choice as ``[a|b]`` (typer's own display is the Python annotation, ``<list[Path]>``);
    a repeatable option shows its element's type (its help says "repeatable")."""
    desc = self.type_descriptor
    if desc.is_choice:
        return "[" + "|".join(str(c) for c in desc.choices or ()) + "]"
    if desc.is_path:
        return "PATH"
    annotation = desc.annotation
    if desc.is_list:
        (annotation,) = get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "PATH"
    return _CLICK_NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)).upper())


_CLICK_NAMES: dict[object, str] = {str: "TEXT", int: "INTEGER", float: "FLOAT", bool: "BOOLEAN"}


typer.core._TyperParameter.display_type = _click_metavar  # type: ignore[method-assign]


def _print_version(value: bool) -> None:
    """``--version``: print ``ddlscope X.Y.Z`` and exit 0."""
    if value:
        from ddlscope import __version__

        typer.echo(f"ddlscope {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="ddlscope",
    help="Where a distributed training step's time goes, what a change would buy, "
    "and why parameter-server RPCs are slow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="print the version and exit", is_eager=True,
                                 callback=_print_version),
) -> None:
    """Where a distributed training step's time goes, what a change would buy, and why
    parameter-server RPCs are slow. See README.md and docs/."""

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
