# Copyright (c) mocoplug contributors. All rights reserved.
from .digits import DigitsDataset

__all__ = ['DigitsDataset']
