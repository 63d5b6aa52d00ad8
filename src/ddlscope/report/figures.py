"""The shared figure style: one look for every ddlscope figure.

Figures are made with matplotlib's object API on the non-interactive Agg backend (no display is
needed). Components keep one colour everywhere (:data:`COMPONENT_COLORS`).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

COMPONENT_COLORS: dict[str, str] = {
    "data_io": "#8c8c8c",
    "compute_bound": "#1f77b4",
    "memory_bound": "#17becf",
    "pcie": "#ff7f0e",
    "nvlink": "#2ca02c",
    "network": "#d62728",
    "communication": "#d62728",
    "device_copy": "#9467bd",
    "unclassified": "#bcbd22",
    "idle": "#e0e0e0",
}
"""Colour of each step-time component (the model's and the measured breakdown's)."""

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
