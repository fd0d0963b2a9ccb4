# Copyright (c) mocoplug contributors. All rights reserved.
from .results_figure import plot_results_figure
from .scalar_curves import load_scalars, plot_scalar_curves

__all__ = ['load_scalars', 'plot_scalar_curves', 'plot_results_figure']
