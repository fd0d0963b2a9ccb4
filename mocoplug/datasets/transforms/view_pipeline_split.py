# Copyright (c) mocoplug contributors. All rights reserved.
"""Which steps of a view pipeline the workers run (geometric) and which the
model's device runs (photometric), for the device augmentation path. Only
flips commute with the photometric steps; any other order, or an unknown
transform, is refused with the step named."""
from typing import List, Sequence, Tuple, Union

# geometric transforms run by the workers (names without scope prefix)
WORKER_TRANSFORMS = frozenset({
    'RandomResizedCrop', 'RandomFlip', 'Resize', 'ResizeEdge', 'CenterCrop',
    'RandomCrop', 'NumpyToPIL', 'PILToNumpy', 'torchvision/RandomAffine',
    'FixedRandomAffine'
})
# photometric transforms the device runs batched (RandomApply only around
# one colour jitter, as in every MoCo recipe)
DEVICE_TRANSFORMS = frozenset({
    'RandomApply', 'ColorJitter', 'FastColorJitter', 'RandomGrayscale',
    'FastRandomGrayscale', 'GaussianBlur', 'FastGaussianBlur', 'Solarize'
})
COLOR_JITTERS = frozenset({'ColorJitter', 'FastColorJitter'})
# worker transforms that commute with every device transform
COMMUTE_WITH_DEVICE = frozenset({'RandomFlip'})


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
        ValueError: An unknown transform, a ``RandomApply`` around anything
            but one colour jitter, or a non-flip geometric step after a
            photometric one.
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
                        f'{where}: the device path applies RandomApply only '
                        'around one ColorJitter/FastColorJitter, got '
                        f'{[transform_name(t) for t in inner]}; use the '
                        'per-image pipeline (MultiView) for this recipe')
            device.append(cfg)
        elif name in WORKER_TRANSFORMS:
            if device and name not in COMMUTE_WITH_DEVICE:
                raise ValueError(
                    f'{where} comes after the photometric step '
                    f'{transform_name(device[-1])}: the device path runs '
                    'every photometric step after the workers\' geometric '
                    f'ones, which only {sorted(COMMUTE_WITH_DEVICE)} '
                    'commute with; move it before them or use the '
                    'per-image pipeline (MultiView)')
            worker.append(cfg)
        else:
            raise ValueError(
                f'{where}: unknown to the device augmentation path, which '
                'runs the geometric transforms '
                f'{sorted(WORKER_TRANSFORMS)} in the workers and the '
                f'photometric ones {sorted(DEVICE_TRANSFORMS)} on the '
                'device; use the per-image pipeline (MultiView) for this '
                'recipe')
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
