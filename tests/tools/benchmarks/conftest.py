# Copyright (c) mocoplug contributors. All rights reserved.
import pytest


@pytest.fixture
def benchmark_command(load_tool):
    """The module of a sub-command of tools/benchmarks/benchmark.py, as the
    CLI imports it."""
    return load_tool('benchmarks/benchmark').command_module
