# Copyright (c) mocoplug contributors. All rights reserved.
"""The harness of the benchmark sub-commands: options, short runs, timing
(synchronized on CUDA), the machine, tables and JSON."""
import argparse
import os
import os.path as osp
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import mmengine
import torch
from mmengine.config import Config

from mocoplug.engine.hooks.exact_resume_hook import cpu_model as cpu_name

Device = Union[str, torch.device]
ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIGS = osp.join(ROOT, 'configs')
DIGITS = osp.join(
    CONFIGS, 'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')


def parser(doc: str,
           command: str,
           device: bool = True,
           out: Optional[str] = '--out',
           **ints: Optional[int]) -> argparse.ArgumentParser:
    """The options of ``benchmark.py command``, described by ``doc``:
    ``--device`` (default: CUDA when visible), the JSON path ``out``, an
    integer option per item of ``ints`` (``img_size=64``: ``--img-size 64``).
    """
    parser = argparse.ArgumentParser(
        prog=f'benchmark.py {command}', description=' '.join(doc.split()))
    if device:
        parser.add_argument(
            '--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    if out:
        parser.add_argument(out, help='write the results as JSON here')
    for name, default in ints.items():
        parser.add_argument(
            '--' + name.replace('_', '-'), type=int, default=default)
    return parser


def quiet_cfg(config: Union[str, Config],
              work_dir: str,
              iters: Optional[int] = None,
              log_level: str = 'WARNING') -> Config:
    """``config`` in ``work_dir`` at ``log_level`` without the kNN monitor;
    with ``iters``, that many iterations, no schedule, checkpoint or log."""
    cfg = Config.fromfile(config) if isinstance(config, str) else config
    cfg.work_dir, cfg.log_level = work_dir, log_level
    hooks = cfg.get('custom_hooks', [])
    cfg.custom_hooks = [h for h in hooks if h['type'] != 'KNNMonitorHook']
    if iters:
        cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=iters)
        cfg.param_scheduler = []
        cfg.default_hooks.checkpoint = dict(
            type='CheckpointHook', interval=10**9, save_last=False)
        cfg.default_hooks.logger = dict(type='LoggerHook', interval=10**9)
    return cfg


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
    """Median ms of ``fn()`` over ``repeats`` calls after ``warmup``."""
    for _ in range(warmup):
        timed_ms(fn, device)
    return statistics.median(timed_ms(fn, device) for _ in range(repeats))


def round_robin_ms(
        fns: Dict[str, Callable],
        device: Device = 'cpu',
        repeats: int = 20,
        warmup: int = 3,
        inputs: Optional[Sequence] = None) -> Dict[str, List[float]]:
    """Wall times in ms of each ``fns[name]`` over ``repeats`` rounds after
    ``warmup``, taking turns in each round (a passing load slows them alike);
    with ``inputs``, round ``i`` calls ``fn(inputs[i % len(inputs)])``."""
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
    if hasattr(os, 'getloadavg'):
        return [round(x, 2) for x in os.getloadavg()]
    return [float('nan')] * 3


def machine(device: Device) -> str:
    """The GPU's name, or the CPU, its cores, threads and load average."""
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
    cells = [columns.values()] + [[row[k] for k in columns] for row in rows]
    lines = ['| ' + ' | '.join(map(str, c)) + ' |' for c in cells]
    return '\n'.join(lines[:1] + ['|' + '---|' * len(columns)] + lines[1:])


def print_rows(rows: Dict[str, Any]) -> None:
    """Print ``rows`` (what: ms) as a two-column Markdown table."""
    table = [dict(what=k, value=v) for k, v in rows.items()]
    print(markdown_table(table, dict(what='what', value='ms')))


def write_json(result: Any, path: Optional[str]) -> None:
    """Write ``result`` to ``path`` (if any) as JSON, and say where."""
    if path:
        mmengine.dump(result, path, file_format='json', indent=1)
        print(f'wrote {path}')
