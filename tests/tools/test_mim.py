# Copyright (c) mocoplug contributors. All rights reserved.
"""`mim train/test/run mocoplug ...` through the regular install that
`make setup-mim` writes to .venv-mim (mim reads tools/ and configs/ from
site-packages/mocoplug/.mim, which an editable install does not have).
`make test-mim` runs this file; CI runs it."""
import json
import os
import os.path as osp
import subprocess

import pytest
import torch

from ..configs.test_folder_evaluation import (  # noqa: F401 (fixtures)
    linear_cfg_file, moco_checkpoint, split_folder)

MIM_VENV = os.environ.get('MOCOPLUG_MIM_VENV')
pytestmark = pytest.mark.skipif(
    not MIM_VENV, reason='mim: run `make test-mim` (it sets up .venv-mim)')
DIGITS = 'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py'


def mim(*args: str, cwd) -> str:
    """Run ``mim ARGS`` in ``cwd`` outside this checkout; its output."""
    done = subprocess.run([osp.join(MIM_VENV, 'bin', 'mim'), *args],
                          cwd=cwd,
                          capture_output=True,
                          text=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f'mim {" ".join(args)}:\n{output[-4000:]}'
    return output


def test_mim_runs_the_installed_tools_not_the_checkouts(tmp_path):
    where = subprocess.run([
        osp.join(MIM_VENV, 'bin', 'python'), '-c',
        'import mim.utils as u, mocoplug; '
        'print(u.get_installed_path("mocoplug")); print(mocoplug.__file__)'
    ],
                           cwd=tmp_path,
                           capture_output=True,
                           text=True,
                           check=True).stdout.split()
    for path in where:
        assert path.startswith(MIM_VENV), where
    assert osp.isfile(osp.join(where[0], '.mim', 'tools', 'train.py'))


def test_mim_train_then_run_extract_backbone(tmp_path):
    mim('train',
        'mocoplug',
        DIGITS,
        '--work-dir',
        'pretrain',
        '--cfg-options',
        'train_cfg.max_epochs=1',
        cwd=tmp_path)
    ckpt = torch.load(
        tmp_path / 'pretrain' / 'epoch_1.pth',
        map_location='cpu',
        weights_only=False)
    assert ckpt['meta']['iter'] == 1258 // 64  # one epoch of the digits
    mim('run',
        'mocoplug',
        'extract_backbone',
        'pretrain/epoch_1.pth',
        'backbone.pth',
        cwd=tmp_path)
    # mmpretrain's format: the query backbone under `backbone.`
    backbone = torch.load(tmp_path / 'backbone.pth')['state_dict']
    query = {
        k: v
        for k, v in ckpt['state_dict'].items() if k.startswith('backbone.')
    }
    assert backbone.keys() == query.keys()
    for name, tensor in query.items():
        assert torch.equal(backbone[name], tensor), name


def test_mim_train_and_test_a_linear_classifier(
        tmp_path,
        split_folder,  # noqa: F811 (the fixtures imported above)
        moco_checkpoint):  # noqa: F811
    config = linear_cfg_file(tmp_path)
    mim('train',
        'mocoplug',
        config,
        '--work-dir',
        'linear',
        '--cfg-options',
        f'pretrained={moco_checkpoint[0]}',
        f'data_root={split_folder}',
        cwd=tmp_path)
    mim('test',
        'mocoplug',
        config,
        '--checkpoint',
        'linear/epoch_1.pth',
        '--work-dir',
        'test',
        '--out',
        'metrics.json',
        '--cfg-options',
        f'data_root={split_folder}',
        cwd=tmp_path)
    top1 = json.loads((tmp_path / 'metrics.json').read_text())['accuracy/top1']
    # the test split is val/: the accuracy training logged after its epoch
    logs = list((tmp_path / 'linear').glob('*/vis_data/scalars.json'))
    logged = [json.loads(line) for line in logs[0].read_text().splitlines()]
    val = [r['accuracy/top1'] for r in logged if 'accuracy/top1' in r]
    assert top1 == pytest.approx(val[-1])
