# Copyright (c) mocoplug contributors. All rights reserved.
"""The sub-commands of ``tools/benchmarks/benchmark.py``, one per module."""
