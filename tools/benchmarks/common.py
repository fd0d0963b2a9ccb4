# Copyright (c) mocoplug contributors. All rights reserved.
"""Timing, machine and output helpers shared by the benchmark sub-commands.

Every timed call is bracketed by :func:`synchronize` so that on CUDA the
clock measures finished work, and reported as the median of the timed
rounds after the warm-up rounds.
"""
import importlib.util
import json
import os
import os.path as osp
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch

Device = Union[str, torch.device]
# the repository root and its configs (this file is tools/benchmarks/...)
ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIGS = osp.join(ROOT, 'configs')


def tool_module(name: str):
    """``tools/<name>.py`` imported as a module (tools/ is no package)."""
    path = osp.join(ROOT, 'tools', f'{name}.py')
    spec = importlib.util.spec_from_file_location(f'tools_{name}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synchronize(device: Device) -> None:
    """Wait for the queued work of ``device`` (a no-op on the CPU)."""
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize(device)


def timed_ms(fn: Callable[[], Any], device: Device = 'cpu') -> float:
    """Wall time of one ``fn()`` in milliseconds, synchronized around."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return (time.perf_counter() - start) * 1000


def median_ms(fn: Callable[[], Any],
              device: Device = 'cpu',
              repeats: int = 20,
              warmup: int = 3) -> float:
    """Median wall time of ``fn()`` in milliseconds over ``repeats`` calls
    after ``warmup`` untimed ones."""
    for _ in range(warmup):
        timed_ms(fn, device)
    return statistics.median(timed_ms(fn, device) for _ in range(repeats))


def round_robin_ms(
        fns: Dict[str, Callable],
        device: Device = 'cpu',
        repeats: int = 20,
        warmup: int = 3,
        inputs: Optional[Sequence] = None) -> Dict[str, List[float]]:
    """Wall times in milliseconds of each ``fns[name]`` over ``repeats``
    rounds after ``warmup`` ones, the functions taking turns within each
    round so that a load that comes and goes slows them alike.

    With ``inputs``, round ``i`` calls ``fn(inputs[i % len(inputs)])``.
    """
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for i in range(warmup + repeats):
        for name, fn in fns.items():
            call = fn if inputs is None else (
                lambda fn=fn: fn(inputs[i % len(inputs)]))
            ms = timed_ms(call, device)
            if i >= warmup:
                times[name].append(ms)
    return times


def load_average() -> List[float]:
    """The 1, 5 and 15 minute load averages (NaN where unknown)."""
    if not hasattr(os, 'getloadavg'):
        return [float('nan')] * 3
    return [round(x, 2) for x in os.getloadavg()]


def cpu_name() -> str:
    from mocoplug.engine.hooks.exact_resume_hook import cpu_model
    return cpu_model()


def machine(device: Device) -> str:
    """The device in words: the GPU's name, or the CPU, its cores, torch's
    threads and the load average now."""
    if torch.device(device).type == 'cuda':
        return torch.cuda.get_device_name()
    return (f'CPU {cpu_name()}, {os.cpu_count()} cores, '
            f'{torch.get_num_threads()} torch threads, load average '
            f'{load_average()[0]:.2f}')


def rss_bytes(pid: Union[int, str] = 'self') -> int:
    """Resident set size of a process (Linux ``/proc``)."""
    with open(f'/proc/{pid}/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')


def markdown_table(rows: List[dict], columns: Dict[str, str]) -> str:
    """``rows`` as a Markdown table; ``columns`` maps keys to headers."""
    lines = [
        '| ' + ' | '.join(columns.values()) + ' |', '|' + '---|' * len(columns)
    ]
    for row in rows:
        lines.append('| ' + ' | '.join(str(row[k]) for k in columns) + ' |')
    return '\n'.join(lines)


def write_json(result: Any, path: Optional[str], indent: int = 1) -> None:
    """Write ``result`` to ``path`` as JSON (nothing when ``path`` is
    None) and say where."""
    if not path:
        return
    with open(path, 'w') as f:
        json.dump(result, f, indent=indent)
    print(f'wrote {path}')
