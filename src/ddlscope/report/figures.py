"""The shared figure style: one look for every ddlscope figure.

Figures are made with matplotlib's object API on the non-interactive Agg backend (no display is
needed). Components keep one colour everywhere (:data:`COMPONENT_COLORS`), and so do training
architectures (:data:`ARCH_COLORS`) and collectives (:data:`COLLECTIVE_COLORS`).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

OKABE_ITO: dict[str, str] = {
    "black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "reddish_purple": "#CC79A7",
}
"""The colour-blind-safe palette of Okabe and Ito ("Color Universal Design", 2008; the eight colours
told apart under protanopia, deuteranopia and tritanopia). Every ddlscope figure and report draws
from it (plus greys), and each colour means one thing: **vermillion (the one red) is the network**
(the NIC's communication, and the network stage of an RPC) and nothing else."""

COMPONENT_COLORS: dict[str, str] = {
    "data_io": "#999999",
    "compute_bound": OKABE_ITO["blue"],
    "memory_bound": OKABE_ITO["sky_blue"],
    "pcie": OKABE_ITO["orange"],
    "nvlink": OKABE_ITO["bluish_green"],
    "network": OKABE_ITO["vermillion"],
    "communication": OKABE_ITO["reddish_purple"],
    "device_copy": OKABE_ITO["yellow"],
    "unclassified": "#555555",
    "idle": "#DDDDDD",
}
"""Colour of each step-time component (the model's and the measured breakdown's), the same in every
report and figure; ``communication`` (exposed communication not split by link, as a trace measures
it) is not the network's red."""

ARCH_COLORS: dict[str, str] = {
    "1w1g": OKABE_ITO["black"],
    "1wng": OKABE_ITO["orange"],
    "ps_worker": OKABE_ITO["reddish_purple"],
    "allreduce_local": OKABE_ITO["bluish_green"],
    "allreduce_cluster": OKABE_ITO["blue"],
    "pearl": OKABE_ITO["sky_blue"],
    "all": "#999999",
}
"""Colour of each training architecture (``all``: every job together), in every figure that draws
one line or bar per architecture; never the network's red."""

COLLECTIVE_COLORS: dict[str, str] = {
    "all_reduce": OKABE_ITO["blue"],
    "all_gather": OKABE_ITO["orange"],
    "all_to_all": OKABE_ITO["bluish_green"],
    "reduce_scatter": OKABE_ITO["reddish_purple"],
    "broadcast": OKABE_ITO["black"],  # drawn beside all-reduce in DDP traces: not a second blue
    "reduce": OKABE_ITO["sky_blue"],
    "send_recv": "#5E3C99",  # dark purple (ColorBrewer PuOr): the eight Okabe-Ito colours are taken, and the
    # darkened yellow is the trace idle figure's "dependency"
    "other": "#999999",
}
"""Colour of each collective (the canonical names of :data:`ddlscope.model.collectives.COLLECTIVES`
and ``other``, a communication kernel of no known collective), the same in every figure that draws
one series per collective (``ddlscope trace``'s bus-bandwidth figure, ``ddlscope calibrate``'s
alpha-beta fits); never the network's red. :func:`collective_color` looks a name up."""


def collective_color(name: str) -> str:
    """The colour of collective ``name`` (:data:`COLLECTIVE_COLORS`); a name outside it (a rules
    file's own kind) gets the grey of ``other``."""
    return COLLECTIVE_COLORS.get(name, COLLECTIVE_COLORS["other"])


HIGHLIGHT = OKABE_ITO["reddish_purple"]
"""The tail, the slowest, the point a figure points at (p99, the slowest 1 %, a chosen budget)."""
FIT = OKABE_ITO["black"]
"""A fitted curve over observed points."""
OBSERVED = OKABE_ITO["blue"]
"""Observed points and the main series."""
SECOND = OKABE_ITO["orange"]
"""A second series beside :data:`OBSERVED` (an alternative fit, a second policy)."""
THIRD = OKABE_ITO["bluish_green"]
"""A third series."""


COMPONENT_LABELS: dict[str, str] = {
    "data_io": "data I/O",
    "compute_bound": "compute-bound",
    "memory_bound": "memory-bound",
    "pcie": "PCIe comm.",
    "nvlink": "NVLink comm.",
    "network": "network comm.",
    "communication": "exposed comm.",
    "device_copy": "device copies",
    "unclassified": "unclassified",
    "idle": "idle",
}

STYLE = {
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def new_figure(
    width_in: float = 7.0, height_in: float = 4.0, nrows: int = 1, ncols: int = 1, **kw
) -> tuple[Figure, object]:
    """A figure and its axes in the ddlscope style (``constrained`` layout, so labels never overlap)."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(nrows, ncols, figsize=(width_in, height_in), layout="constrained", **kw)
    return fig, axes


def no_data(ax, text: str) -> None:
    """Say in the middle of an empty panel why it is empty (instead of an empty plot with
    meaningless ticks, or a legend of nothing)."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#555555", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(False)


def close(fig: Figure) -> None:
    """Release a figure's memory (figures are written to files, never shown)."""
    plt.close(fig)
