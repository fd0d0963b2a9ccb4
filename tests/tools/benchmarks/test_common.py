# Copyright (c) mocoplug contributors. All rights reserved.
"""The timing helpers shared by the benchmarks: which calls are timed, in
which order, and what is reported (a scripted clock, so exact values)."""
import importlib
import itertools

import pytest


@pytest.fixture
def common(load_tool):
    load_tool('benchmarks/benchmark')  # makes the package importable
    return importlib.import_module('benchmarks.common')


def scripted_clock(monkeypatch, common, durations_s):
    """perf_counter() returns start/end pairs spaced by ``durations_s``."""
    ticks = []
    now = 0.
    for d in durations_s:
        ticks += [now, now + d]
        now += d + 100.
    clock = iter(ticks)
    monkeypatch.setattr(common.time, 'perf_counter', lambda: next(clock))


def test_median_ms_skips_the_warmup_calls(monkeypatch, common):
    # warm-up calls take 9 s and 7 s; the timed ones 0.003, 0.001, 0.002 s
    scripted_clock(monkeypatch, common, [9., 7., .003, .001, .002])
    calls = itertools.count()
    ms = common.median_ms(lambda: next(calls), 'cpu', repeats=3, warmup=2)
    assert next(calls) == 5
    assert ms == pytest.approx(2.)  # median of 3, 1, 2 ms


def test_round_robin_takes_turns_and_cycles_the_inputs(monkeypatch, common):
    scripted_clock(monkeypatch, common,
                   [1.] * 2 + [.001 * i for i in range(1, 7)])
    order = []
    fns = dict(
        a=lambda x: order.append(('a', x)), b=lambda x: order.append(('b', x)))
    times = common.round_robin_ms(
        fns, 'cpu', repeats=3, warmup=1, inputs=['x', 'y'])
    assert order == [('a', 'x'), ('b', 'x'), ('a', 'y'), ('b', 'y'),
                     ('a', 'x'), ('b', 'x'), ('a', 'y'), ('b', 'y')]
    assert times == {
        'a': pytest.approx([1., 3., 5.]),
        'b': pytest.approx([2., 4., 6.])
    }


def test_markdown_table(common):
    rows = [dict(device='cpu', ms=1.5), dict(device='cuda', ms=0.25)]
    assert common.markdown_table(rows, dict(device='device', ms='ms')) == (
        '| device | ms |\n|---|---|\n| cpu | 1.5 |\n| cuda | 0.25 |')
