# Copyright (c) mocoplug contributors. All rights reserved.
"""Checks of a MoCo training setup that need the dataloader or the number of
processes."""
import logging
from typing import Iterator, List, Optional

import torch.nn as nn
from mmengine.dataset import BaseDataset, DefaultSampler, InfiniteSampler
from mmengine.dist import get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.runner import IterBasedTrainLoop, Runner
from mmpretrain.datasets.samplers import RepeatAugSampler
from mmpretrain.datasets.transforms import PackInputs
from mmpretrain.utils import get_ori_model
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.data import BatchSampler, ConcatDataset, DataLoader

from mocoplug.datasets import unwrap_dataset
from mocoplug.registry import HOOKS
from .momentum_update_hook import MomentumUpdateHook
from .runner_info import current_lrs, param_groups, schedule_facts, step_images

EXCLUDE = 'model.queue.exclude_same_instance=True'
#: Keys of every image the queue may hold (configs/mocov2/README.md).
MAX_QUEUE_KEYS_PER_IMAGE = 4


def _warn(message: str) -> None:
    print_log(message, logger='current', level=logging.WARNING)


def check_split_batch(model: nn.Module, loader: DataLoader) -> None:
    """``shuffle_bn='split'``: every batch, the last one of a pass included,
    must hold at least ``num_splits`` images per process; a batch that
    ``num_splits`` does not divide gets a warning."""
    if getattr(model, 'shuffle_bn', None) != 'split':
        return
    splits = model.num_splits
    batch = loader.batch_size or getattr(loader.batch_sampler, 'batch_size',
                                         None)
    if batch is None:  # a custom batch sampler without a fixed size
        return
    if batch < splits:
        raise ValueError(
            f"MoCo: shuffle_bn='split' normalises every batch in "
            f'model.num_splits={splits} slices, but '
            f'train_dataloader.batch_size={batch} (images per GPU/process) '
            f'is smaller: set model.num_splits to at most {batch} (ideally '
            'a divisor of the batch size) or raise the batch size.')
    if batch % splits:
        _warn(f"MoCo: shuffle_bn='split' with train_dataloader.batch_size="
              f'{batch} and model.num_splits={splits}: the slices are '
              'unequal and normalised one by one (slower); a num_splits that '
              'divides the batch size avoids it.')
    drop_last = getattr(loader.batch_sampler, 'drop_last', loader.drop_last)
    if drop_last or isinstance(loader.sampler, InfiniteSampler):
        return
    try:
        last = len(loader.sampler) % batch
    except TypeError:  # a sampler without a length
        return
    if 0 < last < splits:
        raise ValueError(
            f'MoCo: the last batch of every pass over the data holds {last} '
            f'images per process ({len(loader.sampler)} % batch_size '
            f"{batch}), fewer than shuffle_bn='split' needs "
            f'(model.num_splits={splits}), so training would stop there: '
            'set train_dataloader.drop_last=True (as the MoCo configs do) '
            'or change the batch size or num_splits.')


def gathers(model: nn.Module) -> List[str]:
    """What of ``model`` gathers tensors of one shape across processes."""
    found = []
    if getattr(model, 'shuffle_bn', None) == 'ddp':
        found.append("model.shuffle_bn='ddp'")
    queue = getattr(model, 'queue', None)
    if queue is not None and getattr(queue, 'gather', False):
        found.append('model.queue.gather=True')
    if type(model).__name__ == 'MoCoV3' and queue is None:
        found.append("MoCoV3's in-batch negatives (keys of all processes)")
    return found


def check_equal_batches(model: nn.Module, loader: DataLoader,
                        world_size: int) -> None:
    """Processes whose batches the model gathers need equal batches (unequal
    ones hang NCCL): only a plain ``BatchSampler`` over ``DefaultSampler``
    (``round_up=True``), ``InfiniteSampler`` or ``RepeatAugSampler``."""
    reasons = gathers(model)
    if world_size <= 1 or not reasons:
        return
    why = (f'{type(model).__name__} on {world_size} processes gathers every '
           f"process's batch ({', '.join(reasons)}), which needs batches of "
           'the same size on all processes at every step (unequal ones '
           'would hang NCCL)')
    batch_sampler = getattr(loader, 'batch_sampler', None)
    if type(batch_sampler) is not BatchSampler:
        raise ValueError(
            f'{why}, but train_dataloader.batch_sampler is a '
            f'{type(batch_sampler).__name__}, which may batch the processes '
            'differently: remove train_dataloader.batch_sampler (its '
            'batch_size and drop_last batch every process alike).')
    sampler = batch_sampler.sampler
    if isinstance(sampler, DefaultSampler) and not sampler.round_up:
        raise ValueError(
            f'{why}, but train_dataloader.sampler.round_up=False leaves the '
            "processes' shares of different sizes: set "
            'train_dataloader.sampler.round_up=True (the default).')
    if not isinstance(sampler,
                      (DefaultSampler, InfiniteSampler, RepeatAugSampler)):
        raise ValueError(
            f'{why}, but train_dataloader.sampler is a '
            f'{type(sampler).__name__}, which is not known to give every '
            "process the same number of images: use sampler=dict(type="
            "'DefaultSampler', shuffle=True) (its default round_up=True pads "
            "every share to the same size) or dict(type='InfiniteSampler') "
            'in train_dataloader.')


def iter_transforms(obj, depth: int = 0) -> Iterator:
    """Every transform of a pipeline or list of transforms, nested ones
    (``Compose``, ``MultiView``, ``RandomApply``...) included."""
    if not isinstance(obj, (list, tuple)):
        yield obj
        if depth > 8:
            return
        found = (
            getattr(obj, attr, None) for attr in ('transforms', 'pipelines'))
        obj, depth = [c for c in found if c is not None], depth + 1
    for child in obj:
        yield from iter_transforms(child, depth)


def check_sample_idx(model: nn.Module, dataset) -> None:
    """``exclude_same_instance=True`` needs a unique ``sample_idx`` per image
    (refuses a ``ConcatDataset``, a non-``BaseDataset`` and a
    ``PackInputs`` without it)."""
    queue = getattr(model, 'queue', None)
    if not getattr(queue, 'exclude_same_instance', False):
        return
    base = unwrap_dataset(dataset)  # RepeatDataset, ...
    if isinstance(base, ConcatDataset):
        raise ValueError(
            f'{EXCLUDE} masks keys by their dataset index (sample_idx), but '
            f'train_dataloader.dataset is a {type(base).__name__}: each of '
            'its datasets numbers its images from 0, so different images '
            'share an index and would be masked as the same one. Merge the '
            'data into one dataset (e.g. one CustomDataset over a folder of '
            'folders) or set exclude_same_instance=False.')
    if not isinstance(base, BaseDataset):
        raise ValueError(
            f'{EXCLUDE} needs the dataset index of every image (sample_idx, '
            "set by mmengine's BaseDataset.get_data_info), but "
            f'train_dataloader.dataset is a {type(base).__name__}, not '
            'derived from mmengine.dataset.BaseDataset: derive it from '
            'BaseDataset or set exclude_same_instance=False.')
    packs: List[PackInputs] = [
        t for t in iter_transforms(base.pipeline) if isinstance(t, PackInputs)
    ]
    if not packs:
        print_log(
            f"{EXCLUDE}: no PackInputs; 'sample_idx' is checked at "
            'the first training step.', 'current')
    for pack in packs:
        if 'sample_idx' not in pack.meta_keys:
            raise ValueError(
                f"{EXCLUDE} needs 'sample_idx' in every data sample, but the "
                f'train pipeline packs meta_keys={tuple(pack.meta_keys)}: '
                "add 'sample_idx' to PackInputs' meta_keys in "
                'train_dataloader.dataset.pipeline (it is in mmpretrain\'s '
                'default meta_keys) or set exclude_same_instance=False.')


def warn_without_sync_bn(model: nn.Module, world_size: int) -> List[str]:
    """Warn about (and return the names of) MoCo v3's BatchNorm layers that
    are not SyncBN on several GPUs."""
    if type(model).__name__ != 'MoCoV3' or world_size <= 1:
        return []
    plain = [
        name for name, m in model.named_modules()
        if isinstance(m, _BatchNorm) and not isinstance(m, nn.SyncBatchNorm)
        and not name.startswith('momentum_encoder.')
    ]
    if plain:
        shown = ', '.join(plain[:3]) + (f' and {len(plain) - 3} more'
                                        if len(plain) > 3 else '')
        _warn(f'MoCoV3 trains on {world_size} GPUs/processes with '
              f'{len(plain)} BatchNorm layers that are not synchronised '
              f'({shown}), while MoCo v3 uses SyncBN everywhere: set '
              "norm_cfg=dict(type='SyncBN') in the backbone, neck and "
              "predictor, or sync_bn='torch'.")
    return plain


def warn_dataset_size(model: nn.Module,
                      num_images: int,
                      max_iters: int,
                      schedule: Optional[str] = None) -> List[str]:
    """Log the run's facts; warn (and return the warnings) when the queue
    holds more than ``MAX_QUEUE_KEYS_PER_IMAGE`` keys of every image."""
    facts = [f'{num_images} training images', f'{max_iters} iterations']
    warnings = []
    queue = getattr(model, 'queue', None)
    size = getattr(queue, 'size', None)
    if size:
        per_image = size / max(num_images, 1)
        facts.append(f'queue {size} ({per_image:.1f} keys per image)')
        if per_image > MAX_QUEUE_KEYS_PER_IMAGE \
                and not queue.exclude_same_instance:
            warnings.append(
                f'MoCo: the queue ({size} keys) holds {per_image:.0f} keys '
                f'of every one of the {num_images} training images, which '
                'are negatives of their own image: set model.queue.size to '
                f'at most {MAX_QUEUE_KEYS_PER_IMAGE} x the number of images '
                f'({MAX_QUEUE_KEYS_PER_IMAGE * num_images}) or {EXCLUDE}.')
    if schedule:  # total batch, epochs, lr
        facts.append(schedule)
    source = getattr(model, 'encoders_from', None)
    facts.append(f'encoders from {source}' if source else 'from scratch')
    print_log('MoCo: ' + ', '.join(facts) + '.', logger='current')
    for warning in warnings:
        _warn(warning)
    return warnings


def warn_in_batch_negatives(model: nn.Module, counts: int, keys: int) -> bool:
    """Warn (and return True) when MoCo v3 without a queue accumulates
    gradients: its negatives are one micro-batch's keys."""
    if type(model).__name__ != 'MoCoV3' or getattr(
            model, 'queue', None) is not None or counts <= 1:
        return False
    _warn(f'MoCoV3 with optim_wrapper.accumulative_counts={counts}: the '
          f'in-batch negatives of each query are the {keys} keys of its '
          f'micro-batch (processes x batch), not the {keys * counts} images '
          'of an optimizer step; MoCo v3 relies on large batches of '
          'negatives: raise the batch size or the number of processes '
          'instead.')
    return True


def warn_recipe_batch(runner: Runner) -> Optional[str]:
    """Warn (and return the warning) when the images of an optimizer step
    differ from the config's recipe (``auto_scale_lr.base_batch_size``) and
    the lr is not scaled to them: the detection configs are 8 x 2."""
    scale = runner.cfg.get('auto_scale_lr') or {}
    base = scale.get('base_batch_size')
    world_size = get_world_size()
    images, batch, _ = step_images(runner.train_dataloader,
                                   runner.optim_wrapper, world_size)
    if not base or scale.get('enable', False) or images == base:
        return None
    ratio = images / base
    lrs = dict.fromkeys(
        group.get('initial_lr', group['lr'])
        for group in param_groups(runner.optim_wrapper))
    message = (
        f'this config is a recipe for {base} images an optimizer step '
        f'(auto_scale_lr.base_batch_size) and this run takes {images} '
        f'({world_size} process{"es" if world_size > 1 else ""} x batch '
        f'{batch}); the lr stays {", ".join(f"{x:g}" for x in lrs)}. The '
        f'linear scaling rule gives lr x {ratio:g}: pass --auto-scale-lr to '
        'tools/train.py (or set auto_scale_lr.enable=True)')
    if isinstance(runner.train_loop, IterBasedTrainLoop):
        message += (
            f'; {runner.max_iters} iterations then cover {ratio:g} of the '
            f"recipe's images: train_cfg.max_iters and the lr milestones x "
            f'{1 / ratio:g} keep its epochs')
    if world_size == 1 and 'SyncBN' in str(runner.cfg.get('model')):
        message += (f'; on one process SyncBN is BN over the {batch} images '
                    'of a batch')
    _warn(message + '.')
    return message


@HOOKS.register_module()
class MoCoConfigCheckHook(Hook):
    """Check a MoCo training setup with this module's functions before the
    first batch is loaded; of other models (linear, detection) only the
    total batch against the recipe's (``warn_recipe_batch``)."""

    priority = 'VERY_HIGH'  # before hooks that read data in before_train

    def before_run(self, runner: Runner) -> None:
        if type(runner).__name__ == 'FlexibleRunner' and hasattr(
                get_ori_model(runner.model), 'momentum_pairs'):
            raise ValueError(
                "runner_type='FlexibleRunner' (and its strategy): mocoplug's "
                "MoCo models train with runner_type='mocoplug.MoCoRunner' "
                '(DDP, the momentum update, CPU ranks, its checks); FSDP and '
                'DeepSpeed strategies are not supported. Remove runner_type '
                'and strategy from the config.')

    def before_train(self, runner: Runner) -> None:
        warn_recipe_batch(runner)
        model = get_ori_model(runner.model)
        if not hasattr(model, 'momentum_pairs'):  # not a MoCo model
            return
        if not any(isinstance(h, MomentumUpdateHook) for h in runner.hooks):
            raise ValueError(
                f'{type(model).__name__} has a momentum (key) encoder but no '
                'MomentumUpdateHook is registered, so it would stay frozen at '
                'its initial weights. Add it to the config: custom_hooks = '
                "[dict(type='MomentumUpdateHook', momentum=0.999)] (MoCo "
                "v1/v2), or with schedule='cosine', momentum=0.99 (MoCo v3).")
        loader, world_size = runner.train_dataloader, get_world_size()
        check_equal_batches(model, loader, world_size)
        check_split_batch(model, loader)
        check_sample_idx(model, loader.dataset)
        warn_without_sync_bn(model, world_size)
        images, _, counts = step_images(loader, runner.optim_wrapper,
                                        world_size)
        warn_in_batch_negatives(model, counts, images // counts)
        try:
            num_images = len(unwrap_dataset(loader.dataset))
        except TypeError:  # an iterable dataset without a length
            return
        warn_dataset_size(model, num_images, runner.max_iters,
                          f'{schedule_facts(runner)}, {current_lrs(runner)}')
