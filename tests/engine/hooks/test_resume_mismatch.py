# Copyright (c) mocoplug contributors. All rights reserved.
"""A resume whose checkpoint does not fit the model stops before training
(ExactResumeHook + mocoplug.utils.resume_fit); so does a load_from that
would leave a tensor unloaded (here: a MoCo model's key encoder or queue;
a classifier's head: tests/configs/test_folder_evaluation.py). On
the digits config, one iteration per epoch."""
import os
import subprocess
import sys

import mmpretrain
import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

from mocoplug.registry import HOOKS
from mocoplug.utils.resume_fit import ResumeMismatchError
from ...conftest import unique_experiment_name

ROOT = os.path.dirname(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CONFIG = os.path.join(
    ROOT, 'configs',
    'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
NEW_RUN = ('Resume with the config the checkpoint was written with (a copy '
           'is the text of the checkpoint\'s meta["cfg"]). For a new run from '
           'these weights: a MoCo model takes model.encoders_from=CHECKPOINT')

CALLS = []


@HOOKS.register_module(force=True)
class RecordTrainingHook(Hook):
    """Records the start of training and every iteration (module-level
    CALLS). (mmengine calls before_run hooks before it loads a checkpoint;
    before_train comes after, in the train loop.)"""

    def before_train(self, runner):
        CALLS.append('before_train')

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        CALLS.append(f'iter {runner.iter}')


def digits_cfg(work_dir, max_epochs=1, **model):
    cfg = Config.fromfile(CONFIG)
    cfg.work_dir = str(work_dir)
    cfg.experiment_name = unique_experiment_name(work_dir)
    cfg.log_level = 'WARNING'
    cfg.train_dataloader.batch_size = 8
    cfg.train_dataloader.dataset.indices = 8  # one iteration per epoch
    cfg.train_cfg.max_epochs = max_epochs
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=1)
    # the momentum update and the recorder (the kNN monitor left out)
    assert cfg.custom_hooks[0].type == 'MomentumUpdateHook'
    cfg.custom_hooks = [cfg.custom_hooks[0], dict(type='RecordTrainingHook')]
    cfg.merge_from_dict({f'model.{k}': v for k, v in model.items()})
    return cfg


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    """The digits config's checkpoint after one epoch (queue 4096 x 64,
    neck 256-256-64)."""
    work_dir = tmp_path_factory.mktemp('saved')
    Runner.from_cfg(digits_cfg(work_dir)).train()
    return str(work_dir / 'epoch_1.pth')


def resume(saved, work_dir, load_only=False, **model):
    """Continue to epoch 2 from ``saved`` (``load_only``: load_from without
    resume, a new run of one epoch)."""
    CALLS.clear()
    cfg = digits_cfg(work_dir, max_epochs=1 if load_only else 2, **model)
    cfg.load_from = saved
    cfg.resume = not load_only
    Runner.from_cfg(cfg).train()


def checkpoints(work_dir):
    return sorted(f for f in os.listdir(work_dir) if f.endswith('.pth'))


def test_a_fitting_checkpoint_resumes(saved, tmp_path):
    resume(saved, tmp_path)
    assert CALLS == ['before_train', 'iter 1']
    assert checkpoints(tmp_path) == ['epoch_2.pth']


def test_another_queue_size_stops_before_training(saved, tmp_path):
    with pytest.raises(ResumeMismatchError) as error:
        resume(saved, tmp_path, **{'queue.size': 1024})
    assert ('\n  another shape (checkpoint vs model) (1):\n'
            '    queue.keys: [4096, 64] vs [1024, 64]\n' + NEW_RUN) \
        in str(error.value)
    assert CALLS == []  # the train loop never started
    assert checkpoints(tmp_path) == []


def test_another_neck_width_stops_before_training(saved, tmp_path):
    """hid_channels 256 -> 128: the first Linear and BN and the second
    Linear's input, in both encoders (12 tensors; the last BN keeps 64)."""
    with pytest.raises(ResumeMismatchError) as error:
        resume(saved, tmp_path, **{'neck.hid_channels': 128})
    listed = [
        f'    {encoder}neck.mlp.{name}: {saved_shape} vs {model_shape}'
        for encoder in ('', 'momentum_encoder.')
        for name, saved_shape, model_shape in [
            ('0.weight', [256, 256], [128, 256]),
            ('1.weight', [256], [128]),
            ('1.bias', [256], [128]),
            ('1.running_mean', [256], [128]),
            ('1.running_var', [256], [128]),
            ('3.weight', [64, 256], [64, 128]),
        ]
    ]
    assert '\n'.join(['  another shape (checkpoint vs model) (12):'] + listed +
                     [NEW_RUN]) in str(error.value)
    assert CALLS == []
    assert checkpoints(tmp_path) == []


def test_load_from_with_another_queue_size_is_refused(saved, tmp_path):
    """The queue would keep its random init beside loaded encoders (once
    mmengine's size-mismatch warning)."""
    with pytest.raises(ResumeMismatchError) as error:
        resume(saved, tmp_path, load_only=True, **{'queue.size': 1024})
    assert str(error.value).startswith(
        f'load_from={saved!r} does not fit this MoCo:\n'
        '  another shape (checkpoint vs model) (1):\n'
        '    queue.keys: [4096, 64] vs [1024, 64]\n')
    assert 'use model.encoders_from=PATH instead' in str(error.value)
    assert CALLS == []
    assert checkpoints(tmp_path) == []


def test_load_from_an_mmpretrain_moco_checkpoint_is_refused(saved, tmp_path):
    """mmpretrain's and mmselfsup's layout (momentum_encoder.module.0.*, a
    dim x K queue): the query encoder loaded, the key encoder and the queue
    stayed random, only mmengine's missing-keys list said so."""
    state = torch.load(saved, weights_only=False)['state_dict']
    theirs = {}
    for key, value in state.items():
        if key.startswith('momentum_encoder.'):
            key = key.replace('momentum_encoder.backbone.',
                              'momentum_encoder.module.0.').replace(
                                  'momentum_encoder.neck.',
                                  'momentum_encoder.module.1.')
        theirs[key] = value.t() if key == 'queue.keys' else value
    path = str(tmp_path / 'mmpretrain_moco.pth')
    torch.save(dict(state_dict=theirs), path)
    with pytest.raises(ResumeMismatchError) as error:
        resume(path, tmp_path / 'run', load_only=True)
    assert 'missing from the checkpoint' in str(error.value)
    assert '    momentum_encoder.backbone.' in str(error.value)
    assert '    queue.keys: [64, 4096] vs [4096, 64]' in str(error.value)
    assert 'model.encoders_from=PATH' in str(error.value)
    assert CALLS == []


def test_mmpretrains_own_train_tool_stops_too(saved, tmp_path):
    """mmpretrain's packaged tools/train.py (what `mim train` runs) builds
    the Runner itself; the hook in the config's default_hooks stops it."""
    tool = os.path.join(
        os.path.dirname(mmpretrain.__file__), '.mim', 'tools', 'train.py')
    done = subprocess.run([
        sys.executable, tool, CONFIG, '--work-dir',
        str(tmp_path), '--resume', saved, '--no-persistent-workers',
        '--cfg-options', 'model.queue.size=1024'
    ],
                          capture_output=True,
                          text=True,
                          timeout=300)
    assert done.returncode == 1
    assert 'ResumeMismatchError: Cannot resume' in done.stderr
    assert '    queue.keys: [4096, 64] vs [1024, 64]\n' in done.stderr
    assert checkpoints(tmp_path) == []
