# Copyright (c) mocoplug contributors. All rights reserved.
"""MoCo v1, v2 and v3 in float64 against plain-PyTorch references written
from the papers' pseudocode (``moco_reference.py``): 4 free-running SGD
steps, the key encoder moved by ``MomentumUpdateHook``, on 2 gloo ranks
(Shuffle BN across ranks / keys gathered from both ranks, gradients
averaged by DistributedDataParallel) and, for v1/v2, in 1 process with
split Shuffle BN. Loss of every step, queue (keys, pointer), both encoders'
parameters and BN buffers agree to 1e-10.

Why 1e-10 holds on any machine. Float64 rounds every operation to 1.1e-16
relative. Ours and the reference compute the same formulas and differ only
in rounding: operations reordered or fused (folded split BN vs its
per-slice formula, the fused InfoNCE vs cross-entropy over logits,
``lerp`` vs ``m k + (1 - m) q``), and on another CPU or thread count every
kernel may also sum in another order. The longest sums here have at most
1024 terms (a conv1 weight gradient over 16 images x 8 x 8 positions; BN
statistics over at most 512, convolutions over 72, the loss over 49), so
any two orders of one sum differ by at most 1024 x 1.1e-16 = 1.1e-13 of
the sum of its terms' magnitudes; the terms are O(1) (normal inputs,
BN-normalised activations, unit-norm embeddings, logits <= 1/t = 14.3),
which bounds each quantity's discrepancy by about 1e-12. Four SGD steps
(lr 0.1) through these shallow networks amplify it by a small factor, not
by 100. Measured: at most 3.1e-15 (loss), 1.5e-15 (weights, buffers,
queue). A real error is many orders larger: computing the similarities in
float32, as the models did before, is off by 2e-8 to 6e-7 here.
"""
import os
from types import SimpleNamespace

import pytest
import torch
from mmengine.logging import MessageHub
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import OptimWrapper
from mmpretrain.structures import DataSample

from mocoplug.engine.hooks import MomentumUpdateHook
from mocoplug.models import MoCo, MoCoV3
from ...gloo import free_port, join_gloo_group, run_two_ranks
from . import moco_reference as ref

ATOL = 1e-10
STEPS = 4
MAX_ITERS = 8  # T of MoCo v3's cosine momentum schedule
BATCH = 16  # global: 2 ranks x 8, or 1 process (4 split-BN slices of 4)
SPLITS = 4
QUEUE = 48  # a multiple of the global batch (official code), wraps once
LR = 0.1
MOMENTUM = 0.99  # v1/v2; m_0 = 0.9 for v3's cosine schedule
TAU = dict(v1=0.07, v2=0.2, v3=0.2)
BACKBONE = dict(type='SmallConvNet', channels=(8, 16), pool_after=(0, ))


def views(step: int, rank: int, world_size: int):
    """This rank's share of the two views of step ``step``: 8 x 8 float64
    images, the same whatever the number of ranks."""
    gen = torch.Generator().manual_seed(1000 + step)
    both = torch.randn(2, BATCH, 3, 8, 8, generator=gen, dtype=torch.float64)
    share = BATCH // world_size
    return [v[rank * share:(rank + 1) * share] for v in both]


def samples(n: int):
    return [DataSample(metainfo=dict(sample_idx=i)) for i in range(n)]


def build(version: str, shuffle_bn: str = 'none'):
    """Our model in float64, and the reference with the same weights."""
    torch.manual_seed(0)
    common = dict(
        backbone=BACKBONE, data_preprocessor=dict(type='BaseDataPreprocessor'))
    if version == 'v3':
        tau = TAU['v3']
        model = MoCoV3(
            neck=dict(
                type='MoCoProjectionNeck',
                in_channels=16,
                hid_channels=32,
                out_channels=16,
                with_bias=False,
                with_bn=True,
                with_last_bn=True,
                with_last_bn_affine=False),
            predictor=dict(
                type='MoCoProjectionNeck',
                in_channels=16,
                hid_channels=32,
                out_channels=16,
                with_bias=False,
                with_bn=True,
                with_avg_pool=False),
            head=dict(
                type='InfoNCEHead',
                temperature=tau,
                loss=dict(type='CrossEntropyLoss', loss_weight=2 * tau)),
            **common)
    else:
        model = MoCo(
            neck=dict(
                type='MoCoProjectionNeck',
                in_channels=16,
                hid_channels=32,
                out_channels=16,
                num_layers=1 if version == 'v1' else 2),
            head=dict(type='InfoNCEHead', temperature=TAU[version]),
            queue=dict(type='NegativeKeyQueue', size=QUEUE, dim=16),
            shuffle_bn=shuffle_bn,
            num_splits=SPLITS,
            **common)
    model.init_weights()
    model.double()

    if version == 'v3':
        reference = ref.MoCoV3Reference(
            backbone=torch.nn.Sequential(
                *ref.pooled(ref.conv_layers())).double(),
            projector=torch.nn.Sequential(*ref.mlp(
                [16, 32, 16], bn=True, last_bn=True, bias=False)).double(),
            predictor=torch.nn.Sequential(*ref.mlp(
                [16, 32, 16], bn=True, last_bn=False, bias=False)).double(),
            tau=TAU['v3'],
            m=0.9,
            max_iters=MAX_ITERS,
            lr=LR)
    else:
        head = [16, 16] if version == 'v1' else [16, 32, 16]
        f_q = torch.nn.Sequential(*ref.pooled(ref.conv_layers()),
                                  *ref.mlp(head, False, False,
                                           bias=True)).double()
        if shuffle_bn == 'split':
            ref.split_bn(f_q, SPLITS)
        reference = ref.MoCoReference(
            f_q,
            model.queue.keys,
            t=TAU[version],
            m=MOMENTUM,
            shuffle=shuffle_bn,
            lr=LR)
    for name, (dst, src) in encoder_pairs(model, reference).items():
        assert len(dst) == len(src), name
        for d, s in zip(dst, src):
            assert d.shape == s.shape, name
            d.copy_(s)
    reference.f_k.load_state_dict(reference.f_q.state_dict())
    return model, reference


def encoder_pairs(model, reference):
    """(reference tensors, our tensors) of the online (query) and the
    momentum (key) encoders: parameters and BN buffers, in order."""

    def values(*modules):
        return [t for m in modules for t in m.state_dict().values()]

    online = [model.backbone, model.neck]
    ref_online = [reference.f_q]
    if isinstance(model, MoCoV3):
        online.append(model.predictor)
        ref_online.append(reference.g_q)
    return dict(
        online=(values(*ref_online), values(*online)),
        momentum=(values(reference.f_k), values(model.momentum_encoder)))


def train(version: str, shuffle_bn: str, rank: int = 0, world_size: int = 1):
    """4 steps of ours (mmengine's train_step, DDP on 2 ranks, the hook
    after each step) and of the reference; what to compare."""
    model, reference = build(version, shuffle_bn)
    wrapped = model
    if world_size > 1:
        # as mmengine's runner wraps it: every rank keeps its BN buffers
        wrapped = MMDistributedDataParallel(model, broadcast_buffers=False)
    optim_wrapper = OptimWrapper(
        torch.optim.SGD([p for p in model.parameters() if p.requires_grad],
                        lr=LR,
                        momentum=0.9,
                        weight_decay=1e-4))
    hook = MomentumUpdateHook(
        momentum=0.9, schedule='cosine') if version == 'v3' else \
        MomentumUpdateHook(momentum=MOMENTUM)
    runner = SimpleNamespace(
        model=wrapped,
        optim_wrapper=optim_wrapper,
        iter=0,
        max_iters=MAX_ITERS,
        message_hub=MessageHub.get_current_instance())
    hook.before_train(runner)
    initial_key = model.momentum_encoder.state_dict(
    )['backbone.layers.0.weight'].clone()
    losses = []
    for step in range(STEPS):
        x1, x2 = views(step, rank, world_size)
        torch.manual_seed(100 + step)  # the Shuffle BN permutation
        log_vars = wrapped.train_step(
            dict(
                inputs=[x1.clone(), x2.clone()],
                data_samples=samples(len(x1))), optim_wrapper)
        runner.iter = step
        hook.after_train_iter(runner, step)
        torch.manual_seed(100 + step)
        losses.append((log_vars['loss'].detach(), reference.step(x1, x2)))
    pairs = encoder_pairs(model, reference)
    result = dict(
        losses=losses,
        initial_key=initial_key,
        encoders={
            name: ([t.clone() for t in a], [t.clone() for t in b])
            for name, (a, b) in pairs.items()
        })
    if version != 'v3':
        result['queue'] = ((reference.queue, torch.tensor(reference.ptr)),
                           (model.queue().clone(), model.queue.ptr.clone()))
    return result


def check(result):
    for step, (ours, theirs) in enumerate(result['losses']):
        assert ours.dtype == torch.float64
        torch.testing.assert_close(
            ours, theirs, rtol=0, atol=ATOL, msg=f'loss of step {step}')
    for name, (theirs, ours) in result['encoders'].items():
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert a.dtype == b.dtype, (name, i)
            torch.testing.assert_close(
                a, b, rtol=0, atol=ATOL, msg=f'{name} encoder tensor {i}')
    if 'queue' in result:
        (keys_ref, ptr_ref), (keys, ptr) = result['queue']
        assert keys.dtype == torch.float64
        assert int(ptr) == int(ptr_ref) == STEPS * BATCH % QUEUE
        torch.testing.assert_close(keys, keys_ref, rtol=0, atol=ATOL)
    # the run really trained: the key encoder's first conv moved
    moved = result['encoders']['momentum'][1][0] - result['initial_key']
    assert moved.abs().max() > 1e-4


def _worker(rank: int, port: int, version: str, out_dir: str):
    import torch.distributed as dist
    join_gloo_group(rank, port)
    result = train(version, 'ddp', rank, world_size=2)
    torch.save(result, os.path.join(out_dir, f'{rank}.pth'))
    dist.destroy_process_group()


@pytest.mark.parametrize('version', ['v1', 'v2', 'v3'])
def test_two_ranks_match_the_reference(version, tmp_path):
    run_two_ranks(_worker, free_port(), version, str(tmp_path))
    for rank in range(2):
        check(torch.load(tmp_path / f'{rank}.pth'))


@pytest.mark.parametrize('version', ['v1', 'v2'])
def test_split_shuffle_bn_in_one_process_matches_the_reference(version):
    check(train(version, 'split'))
