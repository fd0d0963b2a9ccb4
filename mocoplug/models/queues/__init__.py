# Copyright (c) mocoplug contributors. All rights reserved.
from .negative_key_queue import NegativeKeyQueue

__all__ = ['NegativeKeyQueue']
