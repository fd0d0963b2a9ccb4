# Copyright (c) mocoplug contributors. All rights reserved.
"""`mim train mocoplug CONFIG`: openmim finds mocoplug's config and its
tools/train.py in the installed package and trains (CPU, 2 iterations)."""
import pytest
import torch

from ..mim_install import regular_install, run_mim

pytest.importorskip(
    'mim',
    reason='openmim is not installed (pip install colorama pandas requests '
    'tabulate && pip install --no-deps openmim==0.3.9)')

DIGITS = 'mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py'


def test_mim_train_mocoplug(tmp_path):
    work_dir = tmp_path / 'work'
    result = run_mim([
        'train', 'mocoplug', DIGITS, '--gpus', '0', '--work-dir',
        str(work_dir), '--cfg-options', 'train_cfg.max_epochs=1',
        'train_dataloader.batch_size=16',
        'train_dataloader.dataset.indices=32',
        'custom_hooks.1.memory_dataloader.dataset.indices=20',
        'custom_hooks.1.query_dataloader.dataset.indices=10'
    ],
                     site=regular_install(tmp_path / 'site'))
    log = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, log
    # mim found the config by name in the package and ran its train.py
    assert f'{tmp_path}/site/mocoplug/.mim/tools/train.py' in result.stdout
    state = torch.load(
        work_dir / 'epoch_1.pth', weights_only=False)['state_dict']
    assert int(state['queue.ptr']) == 32  # 2 iterations of 16 keys
