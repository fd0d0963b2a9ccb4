# Copyright (c) mocoplug contributors. All rights reserved.
"""precise_bn_stats: BN running statistics := the average of the batch
statistics (detectron2's precise BN; the demo's random-encoder baseline)."""
import torch
import torch.nn as nn
from mmengine.model import BaseModel

from mocoplug.models.utils import precise_bn_stats


class BNModel(BaseModel):
    """x -> BatchNorm2d(3) -> mean; ``mode='loss'`` like a detector."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(3)
        self.frozen = nn.BatchNorm2d(3)
        self.linear = nn.Linear(3, 1)
        self.loss_calls = 0

    def train(self, mode=True):
        super().train(mode)
        self.frozen.eval()  # like norm_eval=True: must not be touched
        return self

    def forward(self, inputs, data_samples=None, mode='tensor'):
        out = self.frozen(self.bn(inputs))
        if mode == 'loss':
            self.loss_calls += 1
            return dict(loss=self.linear(out.mean((2, 3))).mean())
        return out


def test_stats_are_the_average_of_batch_statistics():
    model = BNModel().double().train()
    gen = torch.Generator().manual_seed(0)
    batches = [
        dict(
            inputs=torch.randn(4, 3, 5, 5, generator=gen, dtype=torch.float64)
            * (i + 1) + i) for i in range(5)
    ]
    frozen = model.frozen.running_mean.clone()
    count = precise_bn_stats(model, iter(batches), num_iters=3)
    assert count == 3 and model.loss_calls == 3  # training forward
    used = torch.stack([b['inputs'] for b in batches[:3]])
    means = used.mean((1, 3, 4))  # per batch, per channel
    vars_ = used.transpose(1, 2).flatten(2).var(2, unbiased=True)
    # float64: BN's and these means / variances of 100 values of size <= 15
    # (squares <= 225), averaged over 3 batches, in any summation order:
    # within 110 x 2^-53 x 225 < 3e-12
    assert torch.allclose(
        model.bn.running_mean, means.mean(0), rtol=0, atol=1e-10)
    assert torch.allclose(
        model.bn.running_var, vars_.mean(0), rtol=0, atol=1e-10)
    assert model.bn.momentum == 0.1  # restored
    assert torch.equal(model.frozen.running_mean, frozen)


def test_no_batch_norm_or_no_data_changes_nothing():
    model = nn.Sequential(nn.Linear(2, 2))
    assert precise_bn_stats(model, [], 5) == 0
    bn_model = BNModel().train()
    assert precise_bn_stats(bn_model, [], 5) == 0
    assert torch.equal(bn_model.bn.running_mean, torch.zeros(3))


def test_a_given_forward_replaces_the_training_forward():
    model = BNModel().double().train()
    batches = [
        dict(inputs=torch.full((2, 3, 1, 1), float(i), dtype=torch.float64))
        for i in range(4)
    ]
    # each batch is constant, so its variance is 0 and its mean is i
    count = precise_bn_stats(
        model, batches, 4, forward=lambda data: model.bn(data['inputs']))
    assert count == 4 and model.loss_calls == 0
    assert torch.equal(model.bn.running_mean,
                       torch.full((3, ), 1.5, dtype=torch.float64))
    assert torch.equal(model.bn.running_var,
                       torch.zeros(3, dtype=torch.float64))
