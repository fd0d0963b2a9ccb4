# Copyright (c) mocoplug contributors. All rights reserved.
"""Split a view pipeline into the workers' geometric steps and the device's
photometric steps, for the device augmentation path."""
from typing import List, Sequence, Tuple, Union

# geometric transforms run by the workers (names without scope prefix)
WORKER_TRANSFORMS = frozenset({
    'RandomResizedCrop', 'RandomFlip', 'Resize', 'ResizeEdge', 'CenterCrop',
    'RandomCrop', 'NumpyToPIL', 'PILToNumpy', 'torchvision/RandomAffine',
    'FixedRandomAffine'
})
# photometric transforms the device runs batched
DEVICE_TRANSFORMS = frozenset({
    'RandomApply', 'ColorJitter', 'FastColorJitter', 'RandomGrayscale',
    'FastRandomGrayscale', 'GaussianBlur', 'FastGaussianBlur', 'Solarize'
})
COLOR_JITTERS = frozenset({'ColorJitter', 'FastColorJitter'})
COMMUTE_WITH_DEVICE = frozenset({'RandomFlip'})  # with every device step


def transform_name(cfg: Union[dict, object]) -> str:
    """The registered name of a transform config, without its scope prefix
    (``'mocoplug.FastColorJitter'`` -> ``'FastColorJitter'``)."""
    type_ = cfg['type'] if isinstance(cfg, dict) else cfg
    if not isinstance(type_, str):
        type_ = getattr(type_, '__name__', repr(type_))
    return type_.rsplit('.', 1)[-1]


def split_view_pipeline(
        pipeline: Sequence[dict]) -> Tuple[List[dict], List[dict]]:
    """Split one ``MultiView`` view pipeline into ``(worker_steps,
    device_steps)``, each in pipeline order.

    Raises:
        ValueError: A step the device path cannot run in this order.
    """
    worker, device = [], []
    for index, cfg in enumerate(pipeline):
        name = transform_name(cfg)
        where = f'view pipeline step {index} ({name})'
        if name in DEVICE_TRANSFORMS:
            if name == 'RandomApply':
                inner = list(cfg.get('transforms', []))
                if len(inner) != 1 or transform_name(
                        inner[0]) not in COLOR_JITTERS:
                    raise ValueError(
                        f'{where}: RandomApply is moved only around one '
                        'ColorJitter/FastColorJitter; use MultiView')
            device.append(cfg)
        elif name in WORKER_TRANSFORMS:
            if device and name not in COMMUTE_WITH_DEVICE:
                raise ValueError(
                    f'{where} comes after the photometric step '
                    f'{transform_name(device[-1])}: move it before them or '
                    'use MultiView')
            worker.append(cfg)
        else:
            raise ValueError(
                f'{where}: unknown to the device augmentation path (it knows '
                f'{sorted(WORKER_TRANSFORMS | DEVICE_TRANSFORMS)}); use '
                'MultiView')
    return worker, device


def repeat_per_view(owner: str, items: list,
                    num_views: Union[int, List[int]]) -> list:
    """Each view pipeline's item repeated its ``num_views`` times, as
    ``MultiView`` counts views."""
    if isinstance(num_views, int):
        num_views = [num_views]
    if len(num_views) != len(items):
        raise ValueError(f'{owner}: {len(items)} view pipelines for '
                         f'num_views={num_views}')
    return [item for item, n in zip(items, num_views) for _ in range(n)]
