# Copyright (c) mocoplug contributors. All rights reserved.
from .digits import DigitsDataset
from .transforms import *  # noqa: F401,F403

__all__ = ['DigitsDataset']
