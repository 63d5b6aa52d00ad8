"""ddlscope.calibrate: see the modules below; calling the package runs :func:`ddlscope.api.calibrate`."""

from ddlscope._callable import make_callable

make_callable(__name__, "calibrate")
