# Copyright (c) mocoplug contributors. All rights reserved.
"""Switch a pretraining config to the device augmentation path in code."""
from mmengine.config import Config, ConfigDict

LOADERS = ('LoadImageFromFile', 'CheckedLoadImageFromFile')
PREPROCESSOR = 'mocoplug.DeviceAugmentDataPreprocessor'


def _fail(problem: str):
    raise ValueError(f'use_device_augmentation: {problem}')


def use_device_augmentation(cfg: Config,
                            decode_on_device: bool = False) -> Config:
    """Make ``MultiView`` ``GeometricMultiView`` (``decode_on_device``:
    the pipeline ``[LoadImageBytes, CropBoxMultiView, PackEncodedViews]``)
    and the data preprocessors ``DeviceAugmentDataPreprocessor``, same views
    and normalisation. Changes and returns ``cfg``."""
    from mocoplug.datasets.transforms import view_pipeline_split  # cycle
    transform_name = view_pipeline_split.transform_name
    pipeline = list(cfg.train_dataloader.dataset.get('pipeline', []))
    names = [transform_name(t) for t in pipeline]
    if names.count('MultiView') != 1:
        _fail('train_dataloader.dataset.pipeline needs exactly one '
              f'MultiView step, got {names}')
    index = names.index('MultiView')
    views = {k: pipeline[index][k] for k in ('num_views', 'transforms')}
    if decode_on_device:
        if len(names) != 3 or names[0] not in LOADERS or names[2] not in (
                'PackInputs', ):
            _fail('decode_on_device needs the pipeline [LoadImageFromFile '
                  f'or CheckedLoadImageFromFile, MultiView, PackInputs], '
                  f'got {names}')
        load = dict(type='mocoplug.LoadImageBytes')
        if pipeline[0].get('backend_args') is not None:
            load['backend_args'] = pipeline[0]['backend_args']
        pipeline = [
            load,
            dict(type='mocoplug.CropBoxMultiView', **views),
            dict(type='mocoplug.PackEncodedViews'),
        ]
    else:
        pipeline[index] = dict(type='mocoplug.GeometricMultiView', **views)
    cfg.train_dataloader.dataset.pipeline = pipeline

    old = dict(cfg.get('data_preprocessor') or {})
    old.update(cfg.model.get('data_preprocessor') or {})
    if transform_name(old.get('type', 'SelfSupDataPreprocessor')) not in (
            'SelfSupDataPreprocessor', 'DeviceAugmentDataPreprocessor'):
        _fail(f'the data preprocessor {old["type"]} is not mmpretrain\'s '
              'SelfSupDataPreprocessor, which the device path extends')
    new = {k: v for k, v in old.items() if k not in ('type', '_scope_')}
    new = ConfigDict(type=PREPROCESSOR, **dict(new, **views))
    cfg.data_preprocessor = new
    if 'data_preprocessor' in cfg.model:
        cfg.model.data_preprocessor = new
    return cfg
