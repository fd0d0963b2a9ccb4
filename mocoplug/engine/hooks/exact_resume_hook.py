# Copyright (c) mocoplug contributors. All rights reserved.
"""Make ``--resume`` continue bit-identically to an uninterrupted run
(docs/design_notes.md#exact-resume)."""
import os
import platform
from typing import Any, Dict, Iterator, List, Optional

import torch
from mmengine.dist import all_gather_object, get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.runner import EpochBasedTrainLoop, IterBasedTrainLoop, Runner

from mocoplug.datasets import dataset_transforms
from mocoplug.datasets.transforms import ReseedWorkerPerEpoch
from mocoplug.registry import HOOKS
from mocoplug.utils.resume_fit import check_load_from_fits, check_resume_fits
from ..random_state import get_random_state, set_random_state
from .runner_info import accumulative_counts, checkpoint_due

STATE_KEY = 'resume_state'
STATE_VERSION = 2
NOT_EXACT = ('the continuation will not be bit-identical to an '
             'uninterrupted run')
# what to change when a kernel setting differs at resume
KERNEL_FIXES = dict(
    torch='install the torch that wrote the checkpoint',
    threads='torch.set_num_threads / OMP_NUM_THREADS as when it was written',
    cpu='resume on the CPU model that wrote it',
    cpu_capability='ATEN_CPU_CAPABILITY as when it was written',
    onednn_isa='ONEDNN_MAX_CPU_ISA as when it was written',
    deterministic='randomness.deterministic as when it was written',
    matmul_precision='torch.set_float32_matmul_precision as when it was '
    'written',
    cuda='resume on the GPU model, CUDA and cuDNN that wrote it',
    allow_tf32='torch.backends.cuda.matmul.allow_tf32 and '
    'torch.backends.cudnn.allow_tf32 as when it was written',
    cudnn_deterministic='randomness.deterministic as when it was written',
    cudnn_benchmark='env_cfg.cudnn_benchmark as when it was written',
    compile="compile (mmengine's, in the config) as when it was written")
# torch.compile's defaults
COMPILED = (('backend', 'inductor'), ('mode', 'default'), ('mode', None),
            ('fullgraph', False), ('dynamic', None), ('options', None))


def cpu_model() -> str:
    """The CPU model name (Linux), else what platform knows."""
    try:
        with open('/proc/cpuinfo') as f:
            names = [n for n in f if n.startswith('model name')]
    except OSError:
        names = []
    return names[0].split(':', 1)[1].strip() if names else (
        platform.processor() or platform.machine())


def kernel_settings(compile_cfg: Any = None) -> Dict[str, Any]:
    """What, besides their inputs, decides how this process's kernels round,
    the config's ``compile`` included (str, int, bool: ``weights_only``)."""
    settings = dict(
        torch=str(torch.__version__),
        threads=torch.get_num_threads(),
        cpu=cpu_model(),
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        onednn_isa=os.environ.get('ONEDNN_MAX_CPU_ISA',
                                  os.environ.get('DNNL_MAX_CPU_ISA', 'ALL')),
        deterministic=torch.are_deterministic_algorithms_enabled(),
        matmul_precision=torch.get_float32_matmul_precision())
    if compile_cfg:  # torch.compile's defaults, however spelt: 'True'
        options = {} if compile_cfg is True else dict(compile_cfg)
        kept = dict(kv for kv in sorted(options.items()) if kv not in COMPILED)
        settings['compile'] = str(kept or True)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cudnn = torch.backends.cudnn
        settings.update(
            cuda=f'{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}, '
            f'cuDNN {cudnn.version()}',
            allow_tf32=f'matmul {torch.backends.cuda.matmul.allow_tf32}, '
            f'cudnn {cudnn.allow_tf32}',
            cudnn_deterministic=cudnn.deterministic,
            cudnn_benchmark=cudnn.benchmark)
    return settings


def rounding_differences(saved: Optional[dict], new: dict) -> List[str]:
    """Why kernels under the settings ``new``, resumed from ``saved``
    (None: not recorded), may round unlike an uninterrupted run's."""
    why = [
        f'the kernel setting {key} was {saved.get(key)!r} when the checkpoint '
        f'was written and is {new.get(key)!r} now ({KERNEL_FIXES.get(key)})'
        for key in sorted(set(saved) | set(new))
        if saved.get(key) != new.get(key)
    ] if saved else ['the checkpoint records no kernel settings']
    if 'cuda' in new and (not new['deterministic'] or new['cudnn_benchmark']):
        why.append(f'deterministic algorithms are {new["deterministic"]} '
                   f'and cudnn.benchmark is {new["cudnn_benchmark"]} on CUDA,'
                   ' where not even an uninterrupted run repeats itself (set '
                   'randomness.deterministic=True, cudnn_benchmark=False in '
                   'env_cfg)')
    return why


def lost_training_state(runner: Runner, checkpoint: dict) -> List[str]:
    """What of the training state besides the random streams the checkpoint
    cannot restore: optimizer state, scheduler state, the gradients of an
    unfinished accumulation window (each with its fix)."""
    lost = []
    save = 'default_hooks.checkpoint.save_{}=True (a best_*.pth has neither)'
    if 'optimizer' not in checkpoint:
        lost.append(
            'the checkpoint holds no optimizer state: the optimizer '
            "(SGD's momentum, LARS's or AdamW's moments) restarts from "
            f'zero (resume from one saved with {save.format("optimizer")})')
    if runner.param_schedulers and 'param_schedulers' not in checkpoint:
        lost.append('the checkpoint holds no scheduler state: the lr '
                    'schedule restarts from its first step (resume from one '
                    f'saved with {save.format("param_scheduler")})')
    counts = accumulative_counts(runner.optim_wrapper)
    done = int(checkpoint.get('meta', {}).get('iter', 0))
    if done % counts:
        lost.append(
            f'iteration {done} is inside an accumulation window of '
            f'optim_wrapper.accumulative_counts={counts}: the gradients of '
            f'iterations {done - done % counts + 1}-{done} are not in the '
            f'checkpoint (save every multiple of {counts} iterations: the '
            'checkpoint interval, or iterations an epoch, a multiple of '
            f'{counts})')
    return lost


def _warn(message: str) -> None:
    print_log(f'ExactResumeHook: {message}', logger='current', level=30)


def _loop_kind(loop) -> str:
    """'iter', 'epoch' or 'other'."""
    return 'iter' if isinstance(loop, IterBasedTrainLoop) else (
        'epoch' if isinstance(loop, EpochBasedTrainLoop) else 'other')


def _apply_before_next(iterator: Iterator, hook: 'ExactResumeHook',
                       skip: int) -> Iterator:
    """IterBasedTrainLoop's dataloader iterator, applying the pending
    snapshot before each batch after the ``skip`` replayed ones."""
    while True:
        skip -= 1
        if skip < 0:
            hook.apply_pending()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        yield batch


@HOOKS.register_module()
class ExactResumeHook(Hook):
    """Save the random state in checkpoints and restore it on resume so the
    continuation is bit-identical to an uninterrupted run.

    The checkpoint gets a ``resume_state`` entry: every rank's
    :func:`get_random_state`, the sampler seed, loop kind, ``num_workers``,
    world size and :func:`kernel_settings`. On resume a checkpoint whose
    model tensors do not fit is refused; then the log says whether the
    continuation is bit-identical, or warns with each difference and its
    fix."""

    # after LOW hooks (KNNMonitorHook), before CheckpointHook (VERY_LOW = 90)
    priority = 89

    def __init__(self) -> None:
        self._pending = self._snapshot = self._seeder = None
        self._mode = 'epoch'

    def apply_pending(self) -> None:
        """Restore the pending snapshot, if any (both runs)."""
        if self._pending is not None:
            missing, self._pending = set_random_state(self._pending), None
            if missing:
                _warn(f'could not restore {", ".join(missing)}; {NOT_EXACT}.')

    def _take_snapshot(self, epoch: int, iteration: int, gather: bool) -> None:
        self._pending = state = get_random_state()
        ranks = all_gather_object(state) if gather else [state]
        self._snapshot = dict(epoch=epoch, iter=iteration, ranks=ranks)

    def before_train(self, runner: Runner) -> None:
        self._mode = _loop_kind(runner.train_loop)
        loader = getattr(runner.train_loop, 'dataloader', None)
        if self._mode != 'epoch' or getattr(loader, 'num_workers', 0) <= 0:
            return
        self._mode = 'epoch-workers'  # the seeder re-seeds the workers
        transforms = dataset_transforms(loader.dataset)
        if transforms is None:
            if getattr(loader, 'persistent_workers', False):
                _warn('the training dataset has no pipeline to re-seed '
                      f'persistent workers per epoch; after a resume '
                      f'{NOT_EXACT}. Set persistent_workers=False (or '
                      '--no-persistent-workers) for exact resumes.')
            return
        if not isinstance((transforms or [None])[0], ReseedWorkerPerEpoch):
            transforms.insert(0, ReseedWorkerPerEpoch())
        self._seeder = transforms[0]
        self._seeder.seed, self._seeder.rank = int(runner.seed), get_rank()

    def before_train_epoch(self, runner: Runner) -> None:
        if self._seeder is not None:
            self._seeder.set_epoch(runner.epoch)
        if self._mode == 'epoch':
            self.apply_pending()  # the epoch's first batch is loaded next
        elif self._mode == 'iter':
            loop = runner.train_loop
            loop.dataloader_iterator = _apply_before_next(
                loop.dataloader_iterator, self, skip=runner.iter)

    def before_train_iter(self, runner: Runner, batch_idx, **kwargs) -> None:
        if self._mode == 'epoch-workers':
            self.apply_pending()

    def after_train_iter(self, runner: Runner, batch_idx, **kwargs) -> None:
        if self._mode == 'iter' and checkpoint_due(runner, by_epoch=False):
            self._take_snapshot(runner.epoch, runner.iter + 1, gather=True)

    def after_train_epoch(self, runner: Runner) -> None:
        if self._mode in ('epoch', 'epoch-workers'):
            self._take_snapshot(runner.epoch + 1, runner.iter,
                                checkpoint_due(runner, by_epoch=True))

    def before_save_checkpoint(self, runner: Runner, checkpoint: dict) -> None:
        meta, snapshot = checkpoint.get('meta', {}), self._snapshot or {}
        here = dict(epoch=meta.get('epoch'), iter=meta.get('iter'))
        same = all(snapshot.get(k) == v for k, v in here.items())
        ranks = snapshot.get('ranks') if same else None  # else saved elsewhere
        loader = runner.train_loop.dataloader
        seed = getattr(getattr(loader, 'sampler', None), 'seed', None)
        checkpoint[STATE_KEY] = dict(
            here,
            version=STATE_VERSION,
            loop=self._mode,
            exact=ranks is not None and len(ranks) == get_world_size(),
            num_workers=int(getattr(loader, 'num_workers', 0)),
            world_size=get_world_size(),
            sampler_seed=None if seed is None else int(seed),
            kernels=kernel_settings(runner.cfg.get('compile')),
            ranks=ranks or [get_random_state()])  # else this rank's, now

    def after_load_checkpoint(self, runner: Runner, checkpoint: dict) -> None:
        if not getattr(runner, '_resume', False):  # load_from: no resume
            return check_load_from_fits(runner.model, checkpoint,
                                        runner._load_from)
        check_resume_fits(runner.model, checkpoint)  # DDP unwrapped there
        state = checkpoint.get(STATE_KEY)
        if state is None:
            return _warn('the checkpoint carries no random state (written '
                         'without ExactResumeHook): the random streams are '
                         f'not restored; {NOT_EXACT}.')
        # what stops the streams continuing; the sampler seed restored first
        loop, mode = runner.train_loop, _loop_kind(runner.train_loop)
        saved_mode = state['loop'].split('-')[0]  # 'epoch-workers'
        workers = int(getattr(loop.dataloader, 'num_workers', 0))
        sampler = getattr(loop.dataloader, 'sampler', None)
        saved_seed = state.get('sampler_seed')
        seed = getattr(sampler, 'seed', saved_seed)
        if mode == 'epoch' and saved_seed not in (None, seed):
            sampler.seed = seed = saved_seed  # read afresh every epoch
        problems = [
            text for bad, text in
            ((mode == 'other', f'{type(loop).__name__} is not supported (only '
              'EpochBasedTrainLoop and IterBasedTrainLoop)'),
             (mode not in ('other', saved_mode), 'the checkpoint was written '
              f'by a {saved_mode}-based loop, this run is {mode}-based'),
             (not state['exact'], 'the checkpoint was not taken at an epoch '
              'end (use IterBasedTrainLoop for mid-epoch checkpoints) or not '
              'all ranks\' states were gathered'),
             (state['world_size'] != get_world_size(), 'it was written by '
              f'{state["world_size"]} processes, this run has '
              f'{get_world_size()}'),
             (state['num_workers'] != workers, 'it was written with '
              f'num_workers={state["num_workers"]}, this run has {workers}'),
             (saved_seed not in (None, seed), f'the sampler seed {seed} '
              f'differs from the checkpoint\'s {saved_seed} (set '
              f'randomness.seed={saved_seed})')) if bad
        ]
        if problems:
            return _warn('; '.join(problems) + f'; {NOT_EXACT}.')
        now = kernel_settings(runner.cfg.get('compile'))
        self._pending, self._snapshot = state['ranks'][get_rank()], None
        rounding = rounding_differences(state.get('kernels'), now)
        done = (f'resuming at epoch {state["epoch"]}, iteration '
                f'{state["iter"]} with the random streams, data order and '
                'process and worker counts of the checkpoint')
        lost = lost_training_state(runner, checkpoint)
        if lost:
            return _warn(f'{done}, but the training state differs from an '
                         "uninterrupted run's: " + '; '.join(lost + rounding) +
                         f'; {NOT_EXACT}.')
        if rounding:  # the same batches and augmentations, other rounding
            return _warn(f'{done}: the data order and augmentations are an '
                         'uninterrupted run\'s, but the floating-point '
                         'results may differ in the last bits because ' +
                         '; '.join(rounding) + '.')
        kernels = ', '.join(f'{k} {v}' for k, v in now.items())
        print_log(
            f'ExactResumeHook: {done}, under its kernel settings ({kernels}): '
            'the continuation is bit-identical', 'current')
