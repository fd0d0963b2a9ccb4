# Copyright (c) mocoplug contributors. All rights reserved.
"""What hooks read of the runner: when mmengine's ``CheckpointHook`` is about
to save (mmengine does not expose it), the learning rate and schedule; and
figures averaged over the ranks, to decide alike on every rank."""
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import torch
from mmengine.dist import all_reduce, get_world_size
from mmengine.hooks import CheckpointHook
from mmengine.runner import Runner

from mocoplug.datasets import unwrap_dataset


def checkpoint_due(runner: Runner, by_epoch: bool) -> bool:
    """Whether a ``CheckpointHook`` saves at the end of this epoch
    (``by_epoch=True``, in ``after_train_epoch``) or iteration (in
    ``after_train_iter``), by its own tests."""
    every, last = (('every_n_epochs', 'is_last_train_epoch') if by_epoch else
                   ('every_n_train_iters', 'is_last_train_iter'))
    return any(
        getattr(hook, every)(runner, hook.interval, hook.save_begin) or (
            hook.save_last and getattr(hook, last)(runner))
        for hook in runner.hooks
        if isinstance(hook, CheckpointHook) and hook.by_epoch == by_epoch)


def mean_over_ranks(
        values: Union[Sequence[float], torch.Tensor]) -> List[float]:
    """``values`` averaged over the ranks (one all_reduce; in one process
    as they are): a decision taken from them is the same on every rank."""
    values = torch.as_tensor(values, dtype=torch.float64)
    all_reduce(values, op='mean')  # (mmengine's: nothing in one process)
    return values.tolist()


def current_lrs(runner: Runner) -> Optional[str]:
    """The lr of every param group if they differ, e.g. ``'lr 0.03'``; None
    without an optimizer."""
    try:
        lrs = runner.optim_wrapper.get_lr()
    except Exception:  # no optimizer: the caller says so rather than fail
        return None
    return '; '.join(f'{name} ' + ', '.join(f'{x:.6g}'
                                            for x in dict.fromkeys(groups))
                     for name, groups in lrs.items()) or None


def loader_batch_size(loader) -> int:
    """Images a batch of ``loader`` holds (a ``batch_sampler``'s too)."""
    return loader.batch_size or getattr(loader.batch_sampler, 'batch_size',
                                        None) or 1


def optim_wrappers(optim_wrapper) -> list:
    """An ``OptimWrapperDict``'s wrappers, else ``[optim_wrapper]``."""
    wrappers = getattr(optim_wrapper, 'optim_wrappers', None)
    return [optim_wrapper] if wrappers is None else list(wrappers.values())


def param_groups(optim_wrapper) -> Iterator[dict]:
    """Every param group of ``optim_wrapper`` (of each of its wrappers)."""
    for wrapper in optim_wrappers(optim_wrapper):
        yield from wrapper.optimizer.param_groups


def accumulative_counts(optim_wrapper) -> int:
    """Micro-batches an optimizer step accumulates (the largest over an
    ``OptimWrapperDict``'s wrappers; 1 without accumulation)."""
    return max((int(getattr(w, '_accumulative_counts', 1))
                for w in optim_wrappers(optim_wrapper)),
               default=1)


def step_images(loader, optim_wrapper, world: int) -> Tuple[int, int, int]:
    """(images, batch, accumulated micro-batches) of an optimizer step of
    ``world`` processes: images = processes x batch x counts."""
    batch = loader_batch_size(loader)
    counts = accumulative_counts(optim_wrapper)
    return world * batch * counts, batch, counts


def schedule_facts(runner: Runner) -> str:
    """E.g. 'total batch 64, 95.0 epochs of 194 images' (what is known);
    the total batch counts accumulated micro-batches."""
    loader = runner.train_dataloader
    wrapper = getattr(runner, 'optim_wrapper', None)
    batch, _, counts = step_images(loader, wrapper, get_world_size())
    step = batch // counts
    if counts > 1:
        batch = f'{batch} ({step} a step x {counts} accumulated)'
    try:
        images = len(unwrap_dataset(loader.dataset))
    except TypeError:
        return f'total batch {batch}'
    epochs = runner.max_iters * step / max(images, 1)
    return f'total batch {batch}, {epochs:.1f} epochs of {images} images'
