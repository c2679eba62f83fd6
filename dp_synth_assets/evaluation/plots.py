"""The owner's report figures: per-column histograms and the 2-way TVD heatmap, as PNG bytes.

Figures are drawn on a `matplotlib.figure.Figure` with an Agg canvas, never through pyplot, so no
global backend or figure registry is touched; the PNGs carry no Software entry. Sizes are
functions of the number of columns (`histogram_figsize`, `heatmap_figsize`, inches at `DPI`).
"""

import io
import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from .fidelity import column_comparison
from .tables import Table

DPI = 100
HIST_COLUMNS = 4                # panels per row of the histogram grid
HIST_PANEL_INCHES = (3.6, 2.5)  # width, height of one panel
HIST_LEGEND_INCHES = 0.5        # strip on top for the title and legend
HIST_MAX_TICK_LABELS = 12       # label every code up to this many codes, else a few code ticks
REAL_COLOUR, SYNTHETIC_COLOUR = "#4c72b0", "#dd8452"


def _figure(width: float, height: float, constrained: bool = True):
    """A matplotlib Figure on its own Agg canvas (no pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained" if constrained else None)
    FigureCanvasAgg(figure)
    return figure


def _png(figure) -> bytes:
    """The figure as PNG bytes, without a Software entry."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def histogram_grid(n_columns: int) -> tuple[int, int]:
    """(rows, columns) of panels in `histograms_png` for `n_columns` table columns."""
    cols = max(1, min(HIST_COLUMNS, n_columns))
    return max(1, math.ceil(n_columns / cols)), cols


def histogram_figsize(n_columns: int) -> tuple[float, float]:
    """Size in inches (width, height) of `histograms_png`'s figure; pixels = inches * DPI."""
    rows, cols = histogram_grid(n_columns)
    return cols * HIST_PANEL_INCHES[0], rows * HIST_PANEL_INCHES[1] + HIST_LEGEND_INCHES


def _short(text: str, limit: int = 14) -> str:
    """`text` cut in the middle to at most `limit` characters (names sharing a prefix stay
    apart)."""
    text = str(text)
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2 + (limit - 1) % 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def _bars(ax, centres: np.ndarray, heights: Sequence[float], width: float, colour: str) -> None:
    """Bars as one PolyCollection (one artist instead of a patch per bar: a 100-code column
    draws as fast as a binary one)."""
    from matplotlib.collections import PolyCollection

    h = np.asarray(heights, dtype=float)
    left, right = centres - width / 2, centres + width / 2
    verts = np.stack([np.stack([left, np.zeros_like(h)], 1), np.stack([left, h], 1),
                      np.stack([right, h], 1), np.stack([right, np.zeros_like(h)], 1)], axis=1)
    ax.add_collection(PolyCollection(verts, facecolors=colour, edgecolors="none"))


def histograms_png(real: Table, synthetic: Table, domain: Mapping[str, int],
                   labels: Mapping[str, Sequence[str]] | None = None) -> bytes:
    """One PNG: a grid of per-column histograms (shares of rows per code), real and synthetic bars
    side by side, each panel titled with the column and its 1-way TVD. `labels[column][code]`
    names the ticks of columns with at most `HIST_MAX_TICK_LABELS` codes (others show a few code
    numbers). Size: `histogram_figsize(len(domain))` inches at `DPI`."""
    from matplotlib.patches import Patch

    comparison = column_comparison(real, synthetic, domain)
    width, height = histogram_figsize(len(comparison))
    figure = _figure(width, height, constrained=False)
    rows, cols = histogram_grid(len(comparison))
    axes = figure.subplots(rows, cols, squeeze=False, gridspec_kw={
        "left": 0.45 / width, "right": 1 - 0.15 / width, "bottom": 0.75 / height,
        "top": 1 - (HIST_LEGEND_INCHES + 0.3) / height, "wspace": 0.3,
        "hspace": 1.05 / HIST_PANEL_INCHES[1]})
    for ax, entry in itertools.zip_longest(axes.ravel(), comparison):
        if entry is None:
            ax.set_axis_off()
            continue
        k = entry["codes"]
        x = np.arange(k)
        _bars(ax, x - 0.2, entry["real"], 0.4, REAL_COLOUR)
        _bars(ax, x + 0.2, entry["synthetic"], 0.4, SYNTHETIC_COLOUR)
        top = max(max(entry["real"]), max(entry["synthetic"]))
        ax.set_xlim(-0.7, k - 0.3)
        ax.set_ylim(0, top * 1.08 if top > 0 else 1)
        ax.set_title(f"{_short(entry['column'], 28)}  (TVD {entry['tvd']:.3f})", fontsize=9)
        ax.tick_params(labelsize=7)
        names = (labels or {}).get(entry["column"])
        if k <= HIST_MAX_TICK_LABELS:
            ax.set_xticks(x)
            if names is not None:
                names = [_short(n) for n in list(names)[:k]] + [str(i) for i in range(len(names), k)]
                ax.set_xticklabels(names, rotation=30 if k > 3 else 0,
                                   ha="right" if k > 3 else "center")
        else:
            ax.set_xticks(np.unique(np.linspace(0, k - 1, 6).round().astype(int)))
    figure.legend([Patch(color=REAL_COLOUR), Patch(color=SYNTHETIC_COLOUR)], ["real", "synthetic"],
                  loc="upper center", ncols=2, fontsize=9, frameon=False,
                  bbox_to_anchor=(0.5, 1 - 0.05 / height))
    figure.text(0.5, 0.12 / height, "code (share of rows per code)", ha="center", fontsize=8)
    return _png(figure)


def heatmap_figsize(n_columns: int) -> tuple[float, float]:
    """Size in inches (width, height) of `tvd_heatmap_png`'s figure; pixels = inches * DPI."""
    side = max(4.0, 0.5 * n_columns + 2.5)
    return side + 1.0, side


def tvd_heatmap_png(pair_tvds: Mapping[tuple[str, str], float], columns: Sequence[str]) -> bytes:
    """One PNG: the symmetric matrix of 2-way TVDs (diagonal blank), values written in the cells
    when there are at most 16 columns, with a labelled colour bar."""
    n = len(columns)
    index = {c: i for i, c in enumerate(columns)}
    matrix = np.full((n, n), np.nan)
    for (a, b), value in pair_tvds.items():
        if a in index and b in index and a != b:
            matrix[index[a], index[b]] = matrix[index[b], index[a]] = value
    figure = _figure(*heatmap_figsize(n))
    ax = figure.subplots()
    finite = matrix[np.isfinite(matrix)]
    top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    from matplotlib import colormaps

    cmap = colormaps["viridis"].with_extremes(bad="white")
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap=cmap, vmin=0.0, vmax=top)
    ax.set_xticks(np.arange(n), [_short(c, 18) for c in columns], rotation=45, ha="right",
                  fontsize=8)
    ax.set_yticks(np.arange(n), [_short(c, 18) for c in columns], fontsize=8)
    if n <= 16:
        for i, j in zip(*np.nonzero(np.isfinite(matrix))):
            value = matrix[i, j]
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                    color="black" if value > 0.6 * top else "white")
    bar = figure.colorbar(image, ax=ax, shrink=0.8)
    bar.set_label("2-way TVD (1/2 L1 between normalized marginals)", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    mean = float(finite.mean()) if finite.size else math.nan
    ax.set_title(f"2-way marginal TVD per pair (mean {mean:.3f})", fontsize=10)
    return _png(figure)

