# Copyright (c) mocoplug contributors. All rights reserved.
from .scalar_curves import load_scalars, plot_scalar_curves

__all__ = ['load_scalars', 'plot_scalar_curves']
