# Copyright (c) mocoplug contributors. All rights reserved.
import copy
import os

import pytest
from mmengine.config import Config

CONFIGS = os.path.join(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    'configs')


def config_path(name: str) -> str:
    return os.path.join(CONFIGS, name)


def shrink_crops(pipeline, size: int):
    """The same pipeline with every crop/resize producing `size` px."""
    pipeline = copy.deepcopy(pipeline)
    for step in pipeline:
        if step.get('type') == 'MultiView':
            step['transforms'] = [
                shrink_crops(views, size) for views in step['transforms']
            ]
        elif step.get('type') in ('RandomResizedCrop', ):
            step['scale'] = size
        elif step.get('type') == 'ResizeEdge':
            step['scale'] = size
        elif step.get('type') == 'CenterCrop':
            step['crop_size'] = size
    return pipeline


@pytest.fixture
def tiny_data_cfg(image_folder):
    """Replace only the data of a shipped config: real images from a folder,
    small crops, a handful of images, one process."""

    def make(name, work_dir, size=32, n=4, labelled=False):
        cfg = Config.fromfile(config_path(name))
        cfg.work_dir = str(work_dir)
        cfg.log_level = 'WARNING'
        cfg.env_cfg = dict(dist_cfg=dict(backend='gloo'))
        for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
            if cfg.get(field) is None:
                continue
            loader = cfg[field]
            dataset = loader.dataset
            if dataset.type != 'DigitsDataset':
                loader.dataset = dict(
                    type='CustomDataset',
                    data_root=image_folder,
                    with_label=labelled or field != 'train_dataloader',
                    pipeline=shrink_crops(dataset.pipeline, size))
            loader.dataset.indices = n
            loader.batch_size = n
            loader.num_workers = 0
            loader.persistent_workers = False
        return cfg

    return make
