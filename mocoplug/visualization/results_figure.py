# Copyright (c) mocoplug contributors. All rights reserved.
"""One PNG of grouped bar charts of mean ± spread and training curves."""
import os
import os.path as osp
from typing import Dict, Sequence, Tuple

# {row (one bar group, e.g. an encoder): {column (one bar): (mean, spread)}}
BarTable = Dict[str, Dict[str, Tuple[float, float]]]
# {line label: (x values, y values)}
Curves = Dict[str, Tuple[Sequence[float], Sequence[float]]]


def draw_bar_table(ax, table: BarTable, title: str, ylabel: str) -> None:
    """Grouped bars, one group per column and one bar per row, with the
    spread as error bar and the mean written above it."""
    import numpy as np
    rows = list(table)
    columns = list(dict.fromkeys(c for row in rows for c in table[row]))
    width, x = 0.8 / max(len(rows), 1), np.arange(len(columns))
    for i, row in enumerate(rows):
        means = [table[row].get(c, (np.nan, 0))[0] for c in columns]
        spreads = [table[row].get(c, (np.nan, 0))[1] for c in columns]
        pos = x - 0.4 + width * (i + 0.5)
        bars = ax.bar(pos, means, width, yerr=spreads, capsize=3, label=row)
        for bar, mean, spread in zip(bars, means, spreads):
            if not np.isnan(mean):
                ax.annotate(
                    f'{mean:.1f}',
                    (bar.get_x() + bar.get_width() / 2, mean + spread),
                    xytext=(0, 3),
                    textcoords='offset points',
                    ha='center',
                    va='bottom',
                    fontsize=7)
    ax.set(xticks=x, xticklabels=columns, ylim=(0, 118), ylabel=ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis='y', alpha=0.3)
    ax.legend(fontsize=7, loc='upper center', ncol=len(rows))


def draw_curves(ax, curves: Curves, title: str, xlabel: str) -> None:
    """One line per label (markers when there are few points)."""
    for label, (xs, ys) in curves.items():
        ax.plot(xs, ys, label=label, marker='o' if len(xs) < 30 else None)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(fontsize=7)


def plot_results_figure(bar_tables: Sequence[Tuple[str, str, BarTable]],
                        curve_panels: Sequence[Tuple[str, str, Curves]],
                        path: str,
                        suptitle: str = '') -> str:
    """Draw the bar tables (``(title, y label, table)``) over the curves
    (``(title, x label, curves)``) into the PNG ``path``; returns it."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    cols = max(len(bar_tables), len(curve_panels), 1)
    rows = int(bool(bar_tables)) + int(bool(curve_panels))
    fig, axes = plt.subplots(
        rows, cols, figsize=(5.5 * cols, 4.2 * rows), squeeze=False)
    shown = [(bar_tables, draw_bar_table), (curve_panels, draw_curves)]
    for row, (panels, draw) in enumerate(p for p in shown if p[0]):
        for col in range(cols):
            if col < len(panels):
                draw(axes[row][col], *[panels[col][2], *panels[col][:2]])
            else:
                axes[row][col].axis('off')
    if suptitle:
        fig.suptitle(suptitle, fontsize=11)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
