# Copyright (c) mocoplug contributors. All rights reserved.
"""The folder evaluation config's head: mmpretrain's LinearClsHead once its
number of classes is known, and a clear error (naming the fix) when a
runner that is not the config's leaves it None."""
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import RUNNERS
from mmengine.runner import Runner
from mmpretrain.models.heads import LinearClsHead

from mocoplug.models import FolderLinearClsHead
from ...conftest import unique_experiment_name
from ...engine.runner.test_moco_runner import make_labelled_folder

ROOT = osp.dirname(
    osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
LINEAR_FOLDER = osp.join(ROOT, 'configs', 'benchmarks',
                         'linear_r50_8xb32-steplr-100e_folder.py')


def folder_cfg(tmp_path, **options) -> Config:
    cfg = Config.fromfile(LINEAR_FOLDER)
    cfg.work_dir = str(tmp_path / 'work_dir')
    cfg.experiment_name = unique_experiment_name('folder_head')
    cfg.merge_from_dict(options)
    return cfg


def test_is_linear_cls_head_with_the_same_weights_and_outputs():
    torch.manual_seed(0)
    ours = FolderLinearClsHead(num_classes=3, in_channels=4)
    theirs = LinearClsHead(num_classes=3, in_channels=4)
    theirs.load_state_dict(ours.state_dict())  # same keys: fc.weight/bias
    feats = (torch.randn(5, 4, dtype=torch.float64).float(), )
    assert torch.equal(ours(feats), theirs(feats))


def test_plain_runner_from_cfg_names_the_fix(tmp_path):
    cfg = folder_cfg(tmp_path)
    with pytest.raises(ValueError) as info:
        Runner.from_cfg(cfg)
    message = str(info.value)
    assert 'model.head.num_classes is None' in message
    assert 'RUNNERS.build(cfg)' in message and 'data_root' in message


def test_the_configs_runner_fills_num_classes_from_the_folder(tmp_path):
    folder = make_labelled_folder(tmp_path / 'data', classes=('a', 'b', 'c'))
    cfg = folder_cfg(tmp_path, data_root=folder)
    runner = RUNNERS.build(cfg)
    head = runner.model.head
    assert isinstance(head, FolderLinearClsHead)
    assert head.num_classes == 3 and head.fc.out_features == 3
