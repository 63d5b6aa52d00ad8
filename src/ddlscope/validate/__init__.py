"""ddlscope.validate: see the modules below; calling the package runs :func:`ddlscope.api.validate`."""

from ddlscope._callable import make_callable

make_callable(__name__, "validate")
