# Copyright (c) mocoplug contributors. All rights reserved.
"""tools/dist_train.sh end to end with 2 processes on CPU (gloo): DDP
wrapping, Shuffle BN across ranks, the gathered queue, the kNN monitor's
gathered features and the checkpoint."""
import os
import subprocess
import sys

import torch

from ..gloo import free_port

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(
    ROOT, 'configs', 'mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')


def test_two_process_training(tmp_path):
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        PORT=str(free_port()),
        OMP_NUM_THREADS='1')
    cmd = [
        'bash',
        os.path.join(ROOT, 'tools',
                     'dist_train.sh'), CONFIG, '2', '--work-dir',
        str(tmp_path), '--cfg-options', 'model.shuffle_bn=ddp',
        'train_cfg.max_epochs=1', 'train_dataloader.batch_size=16',
        'train_dataloader.dataset.indices=64',
        'custom_hooks.1.memory_dataloader.dataset.indices=40',
        'custom_hooks.1.query_dataloader.dataset.indices=20'
    ]
    result = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    log = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, log
    ckpt = torch.load(tmp_path / 'epoch_1.pth', weights_only=False)
    state = ckpt['state_dict']
    # 64 images / (2 ranks x 16) = 2 iterations; each enqueues 2 x 16 keys
    assert int(state['queue.ptr']) == 64
    assert 'momentum_encoder.backbone.layers.0.weight' in state
    # the kNN monitor ran on the gathered features of both ranks
    log = next(tmp_path.glob('*/*.log')).read_text()
    assert 'kNN (weighted, t=0.07) at iteration 2' in log
