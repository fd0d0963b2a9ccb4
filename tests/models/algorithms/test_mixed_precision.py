# Copyright (c) mocoplug contributors. All rights reserved.
"""MoCo v1/v2/v3 under bfloat16 autocast (what ``tools/train.py --amp`` does
on CPU) and in the channels-last memory format, against float32 / contiguous
runs of the same weights on the same inputs."""
import copy

import pytest
import torch
from mmengine.model import BaseDataPreprocessor
from mmengine.optim import AmpOptimWrapper, OptimWrapper

from mocoplug.engine.hooks import MomentumUpdateHook
from mocoplug.engine.optimizers import BF16OptimWrapper
from .test_moco import parity_eps, samples, tiny_moco
from .test_mocov3 import tiny_mocov3

# bfloat16 keeps 8 significant bits (relative rounding 2^-9) in every
# convolution and linear layer, so q.k carries an error of a few 1e-3 that
# 1/tau amplifies. Measured on these models (seed 0): relative loss error
# 1.2e-2 for v1 (tau 0.07), 4e-4 for v2, 4.5e-3 / 1.7e-3 for v3 without /
# with a queue (tau 0.2); keys within 0.04 of the float32 ones (unit
# vectors); cosine of the SGD updates 0.96 to 0.999. The bounds below leave
# a margin of 2-3x and still fail on a real error (e.g. keys enqueued in
# the wrong step change the loss of the next step by far more).
# Why measured figures transfer to any CPU: the error is that of rounding
# the same float32 weights and activations to bfloat16 (2^-9, the same on
# every machine); how a kernel then accumulates (float32 on every x86
# path) changes results by 2^-24, i.e. flips the bfloat16 rounding of a
# few elements by one bfloat16 ulp: a second-order change of the figures.
BF16_RTOL = dict(mocov1=4e-2, mocov2=1e-2, mocov3=1e-2, mocov3_queue=1e-2)
KEYS_ATOL = 0.1
GRAD_COS = 0.9
# What --amp uses on each device: bfloat16 autocast on CPU; on CUDA float16
# autocast with loss scaling (mmengine's AmpOptimWrapper), whose 10-bit
# mantissa keeps the errors 4x below bfloat16's, so the bounds above hold.
# The scaler starts at 2^10, not 2^16, so that the single step of the test
# is not one the dynamic scaler skips while it looks for its scale.
AMP = dict(
    cpu=(BF16OptimWrapper, torch.bfloat16),
    cuda=(lambda optimizer: AmpOptimWrapper(
        loss_scale=dict(init_scale=2.**10), optimizer=optimizer),
          torch.float16))


def mocov1(**kwargs):
    """MoCo v1: linear projection, tau 0.07 (1/tau = 14.3)."""
    return tiny_moco(
        neck=dict(
            type='MoCoProjectionNeck',
            in_channels=128,
            hid_channels=128,
            out_channels=32,
            num_layers=1),
        head=dict(type='InfoNCEHead', temperature=0.07),
        **kwargs)


BUILDERS = dict(
    mocov1=mocov1,
    mocov2=tiny_moco,
    mocov3=lambda **kw: tiny_mocov3(temperature=0.2, **kw),
    mocov3_queue=lambda **kw: tiny_mocov3(
        temperature=0.2,
        queue=dict(type='NegativeKeyQueue', size=32, dim=16),
        **kw))


def train_step(model, wrapper_type, views):
    """One mmengine training step (preprocessor, loss, backward, SGD step,
    momentum update); returns the logged values."""
    model.to(views[0].device)  # the data preprocessor's device too
    hook = MomentumUpdateHook(momentum=0.99)
    hook.attach(model)
    optimizer = torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad], lr=0.1)
    wrapper = wrapper_type(optimizer=optimizer)
    data = dict(
        inputs=[v.clone() for v in views],
        data_samples=samples(range(views[0].shape[0])))
    log_vars = model.train_step(data, wrapper)
    hook.update(0.99)
    return log_vars


@pytest.mark.parametrize('algo', list(BUILDERS))
def test_bf16_autocast_loss_matches_float32(algo, on_device):
    torch.manual_seed(0)
    model = BUILDERS[algo]()
    twin, initial = copy.deepcopy(model), copy.deepcopy(model)
    dtypes = []
    twin.neck.register_forward_hook(
        lambda module, args, out: dtypes.append(out[0].dtype))
    views = [torch.randn(8, 3, 32, 32) for _ in range(2)]
    fp32 = train_step(model, OptimWrapper, views)
    amp_wrapper, amp_dtype = AMP[on_device]  # float16 on CUDA
    bf16 = train_step(twin, amp_wrapper, views)
    assert dtypes[0] == amp_dtype  # autocast really was on
    assert bf16['loss'].dtype == torch.float32
    assert bf16['loss'].item() == pytest.approx(
        fp32['loss'].item(), rel=BF16_RTOL[algo])
    queue = getattr(twin, 'queue', None)
    if queue is not None:  # float32 keys, written at the next read
        assert queue().dtype == torch.float32
        assert torch.allclose(queue(), model.queue(), atol=KEYS_ATOL)
        assert int(queue.ptr) == int(model.queue.ptr) > 0
    # the SGD step moved the weights the same way: the update of the
    # trainable parameters (lr x gradient) points in the same direction
    deltas = [
        torch.cat([(p - p0).flatten()
                   for p, p0 in zip(m.parameters(), initial.parameters())
                   if p.requires_grad]) for m in (model, twin)
    ]
    assert deltas[0].norm() > 0
    cos = torch.cosine_similarity(deltas[0], deltas[1], dim=0).item()
    assert cos > GRAD_COS


@pytest.mark.parametrize('algo', list(BUILDERS))
def test_channels_last_matches_contiguous(algo):
    """Channels-last only reorders the convolutions' summations: in float64
    (tolerances of test_moco.parity_eps) one training step gives the same
    loss and weights. (In float32 the weights differed by up to 16 eps
    against a tolerance of 84 eps, with no bound behind it.)"""
    torch.manual_seed(0)
    model = BUILDERS[algo]()
    torch.manual_seed(0)
    twin = BUILDERS[algo](channels_last=True)
    twin.load_state_dict(model.state_dict())
    for m in (model, twin):
        # the default preprocessor casts to float32 (and normalises
        # nothing here); mmengine's base one only moves the data
        m.double()
        m.data_preprocessor = BaseDataPreprocessor()
    for module in (twin.backbone, twin.momentum_encoder.backbone):
        weight = module.conv1.weight
        assert weight.is_contiguous(memory_format=torch.channels_last)
        assert not weight.is_contiguous()
    views = [torch.randn(8, 3, 32, 32, dtype=torch.float64) for _ in range(2)]
    out = train_step(model, OptimWrapper, views)
    out_cl = train_step(twin, OptimWrapper, views)
    eps = parity_eps(out['loss'])
    assert out_cl['loss'].item() == pytest.approx(
        out['loss'].item(), abs=1024 * eps)
    # after the step the weights are still channels-last and equal
    assert twin.backbone.conv1.weight.is_contiguous(
        memory_format=torch.channels_last)
    for (name, p), p_cl in zip(model.named_parameters(), twin.parameters()):
        assert torch.allclose(p, p_cl, rtol=0, atol=256 * eps), name
