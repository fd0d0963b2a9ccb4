# Copyright (c) mocoplug contributors. All rights reserved.
"""The demo's pretraining config through mmpretrain's own tools/train.py
(as installed, what `mim train mmpretrain` runs)."""
from ..conftest import unique_experiment_name
from ..packaged_tools import run_packaged_tool
from .conftest import config_path

DIGITS = config_path(
    'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')


def test_digits_with_a_default_hook_switched_off(monkeypatch, tmp_path):
    """mmpretrain's tool sets persistent_workers=True on the demo's
    worker-less loader (torch refuses it) and mmengine asserts on
    default_hooks.NAME=None for a name not its own; the config's runner
    accepts both. 32 images, batch 16: 2 iterations of 1 epoch."""
    runners = run_packaged_tool(monkeypatch, 'mmpretrain', 'train', [
        DIGITS, '--work-dir',
        str(tmp_path), '--cfg-options',
        'default_hooks.representation_health=None', 'train_cfg.max_epochs=1',
        'train_dataloader.batch_size=16',
        'train_dataloader.dataset.indices=32',
        'custom_hooks.1.memory_dataloader.dataset.indices=20',
        'custom_hooks.1.query_dataloader.dataset.indices=10',
        f'experiment_name={unique_experiment_name(tmp_path)}'
    ])
    assert len(runners) == 1
    runner = runners[0]
    assert runner.iter == 2
    hooks = [type(h).__name__ for h in runner.hooks]
    assert 'RepresentationHealthHook' not in hooks
    # the other default hooks of mocoplug's configs are still there
    assert {'ExactResumeHook', 'NonFiniteLossHook',
            'MoCoConfigCheckHook'} <= set(hooks)
    # what mmpretrain's tool set, and what the loader does without workers
    assert runner.cfg.train_dataloader.persistent_workers is True
    assert runner.cfg.train_dataloader.num_workers == 0
    assert runner.train_dataloader.persistent_workers is False
    assert (tmp_path / 'epoch_1.pth').is_file()
