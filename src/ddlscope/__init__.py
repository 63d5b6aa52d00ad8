"""ddlscope: where a distributed training step's time goes, what a change would buy, and why
parameter-server RPCs are slow. See README.md and docs/."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ddlscope")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
