# Copyright (c) mocoplug contributors. All rights reserved.
"""The pretraining configs ask for torch's fused SGD / AdamW kernels, and
those update the weights exactly as torch's default implementation does
(bit for bit for SGD on CPU, to float32 round-off for AdamW)."""
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import OPTIMIZERS

from .conftest import config_path

FUSED = {
    'mocov2_r50_8xb32.py': 'SGD',
    'mocov2_r50_8xb32-coslr-200e_in1k.py': 'SGD',
    'mocov2_r50_8xb32-coslr-800e_in1k.py': 'SGD',
    'mocov1_r50_8xb32-steplr-200e_in1k.py': 'SGD',
    'mocov2_r50_8xb32-coslr-200e_folder.py': 'SGD',
    'mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py': 'SGD',
    'mocov3_vit-small-p16_16xb256-amp-coslr-300e_in1k.py': 'AdamW',
    'mocov3_vit-base-p16_16xb256-amp-coslr-300e_in1k.py': 'AdamW',
}


def _train(optimizer_cfg: dict, steps: int = 4):
    """A few steps of a small conv net (the same weights and gradients
    every call); returns the final parameters."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 5))
    optimizer = OPTIMIZERS.build(
        dict(optimizer_cfg, params=model.parameters()))
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        loss = model(torch.randn(4, 3, 8, 8, generator=gen)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize('name', sorted(FUSED))
def test_config_uses_the_fused_kernel_and_it_updates_as_the_default(name):
    optimizer_cfg = Config.fromfile(
        config_path(name)).optim_wrapper.optimizer.to_dict()
    assert optimizer_cfg['type'] == FUSED[name]
    assert optimizer_cfg.get('fused') is True
    built = OPTIMIZERS.build(
        dict(optimizer_cfg, params=[torch.zeros(2, requires_grad=True)]))
    assert built.defaults['fused'] is True
    fused = _train(optimizer_cfg)
    default = _train(dict(optimizer_cfg, fused=None, foreach=False))
    initial = _train(optimizer_cfg, steps=0)
    # the steps moved every weight tensor, so the equality is not trivial
    assert all(not torch.equal(a, b) for a, b in zip(fused, initial))
    for a, b in zip(fused, default):
        if FUSED[name] == 'SGD':
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
