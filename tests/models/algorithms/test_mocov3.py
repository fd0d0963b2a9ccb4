# Copyright (c) mocoplug contributors. All rights reserved.
"""MoCo v3 (https://arxiv.org/abs/2104.02057) against hand computations of
the official loss, two simulated ranks, and mmpretrain 1.2.0's MoCoV3."""
import os

import pytest
import torch
import torch.nn.functional as F
from mmengine.logging import MessageHub
from mmengine.optim import OptimWrapper
from mmpretrain.models.selfsup import MoCoV3 as MMPretrainMoCoV3
from mmpretrain.structures import DataSample

from mocoplug.engine.hooks import MomentumUpdateHook
from mocoplug.models import MoCoV3
from ...gloo import free_port, join_gloo_group, run_two_ranks
from .test_moco import parity_eps

RESNET = dict(
    type='ResNet',
    depth=18,
    stem_channels=16,
    base_channels=16,
    out_indices=(3, ))
TINY_VIT = dict(
    type='MoCoV3ViT',
    arch=dict(
        embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64),
    img_size=32,
    patch_size=16,
    stop_grad_conv1=True)
DIM = 16


def mlp(in_channels, num_layers, last_bn, avg_pool):
    """A v3 projector / predictor (Linear-BN-ReLU, no bias)."""
    return dict(
        type='MoCoProjectionNeck',
        in_channels=in_channels,
        hid_channels=32,
        out_channels=DIM,
        num_layers=num_layers,
        with_bias=False,
        with_bn=True,
        with_last_bn=last_bn,
        with_last_bn_affine=False,
        with_avg_pool=avg_pool)


def tiny_mocov3(temperature=1.0, vit=False, **kwargs):
    cfg = dict(
        backbone=TINY_VIT if vit else RESNET,
        neck=mlp(32 if vit else 128, 3 if vit else 2, True, not vit),
        predictor=mlp(DIM, 2, vit, False),
        head=dict(
            type='InfoNCEHead',
            temperature=temperature,
            loss=dict(type='CrossEntropyLoss', loss_weight=2 * temperature)))
    cfg.update(kwargs)
    model = MoCoV3(**cfg)
    model.init_weights()
    return model


def samples(ids):
    return [DataSample(metainfo=dict(sample_idx=int(i))) for i in ids]


# Against the official formula computed by hand: the network outputs are
# the same tensors on both sides, only the loss differs. Each of the two
# terms is within 2 t L of the exact one, L = (2 (C + 2) / t + K + 3) u
# (worst case, any summation order; tests/models/utils/
# test_fused_info_nce.py), C = 16, K <= 32 negatives, u = 2^-24: the two
# sides differ by < 2.1e-5, at most 1.2e-5 of the losses here (1.5 to 7.2).
# rel=1e-5 was below that bound.
HAND_RTOL = 1e-4


def ctr(q, k, labels, tau):
    """The official ``contrastive_loss``: CE(q k^T / tau, labels) * 2 tau."""
    q, k = F.normalize(q, dim=1), F.normalize(k, dim=1)
    return F.cross_entropy(q @ k.t() / tau, labels) * (2 * tau)


@torch.no_grad()
def branches(model, view):
    """(query = predictor(projector(backbone)), key = momentum encoder)."""
    query = model.predictor(model.neck(model.backbone(view)))[0]
    return query, model.momentum_encoder(view)[0]


def test_branches_and_frozen_momentum_encoder():
    model = tiny_mocov3()
    # momentum branch = backbone + projector, never the predictor
    assert set(dict(
        model.momentum_encoder.named_children())) == {'backbone', 'neck'}
    for online, momentum in model.momentum_pairs():
        for a, b in zip(online.state_dict().values(),
                        momentum.state_dict().values()):
            assert torch.equal(a, b)
    assert not any(p.requires_grad
                   for p in model.momentum_encoder.parameters())
    assert all(p.requires_grad for p in model.predictor.parameters())
    # projector: Linear(no bias)-BN-ReLU-Linear-BN(no affine)
    layers = list(model.neck.mlp)
    assert [type(m).__name__ for m in layers
            ] == ['Linear', 'BatchNorm1d', 'ReLU', 'Linear', 'BatchNorm1d']
    assert layers[0].bias is None and layers[-1].weight is None
    # ResNet predictor ends with its Linear (no last BN)
    assert type(model.predictor.mlp[-1]).__name__ == 'Linear'


@pytest.mark.parametrize('tau', [1.0, 0.2])
def test_loss_equals_the_official_formula(tau):
    torch.manual_seed(0)
    model = tiny_mocov3(temperature=tau)
    views = [torch.randn(6, 3, 32, 32) for _ in range(2)]
    out = model.loss(views, samples(range(6)))
    q1, k1 = branches(model, views[0])
    q2, k2 = branches(model, views[1])
    labels = torch.arange(6)
    expected = ctr(q1, k2, labels, tau) + ctr(q2, k1, labels, tau)
    assert out['loss'].item() == pytest.approx(expected.item(), rel=HAND_RTOL)
    # contrastive accuracy: share of queries whose own key scores highest
    acc = [(F.normalize(q, dim=1) @ F.normalize(
        k, dim=1).t()).argmax(1).eq(labels).float().mean() * 100
           for q, k in ((q1, k2), (q2, k1))]
    # (discrete: equal as no negative is within round-off of its positive)
    for q, k in ((q1, k2), (q2, k1)):
        sims = F.normalize(q, dim=1) @ F.normalize(k, dim=1).t()
        neg = sims.masked_fill(torch.eye(6, dtype=torch.bool), float('-inf'))
        assert ((neg.amax(1) - sims.diag()).abs() > 1e-5).all()
    assert out['contrast_acc'].item() == pytest.approx(
        (acc[0] + acc[1]).item() / 2)


def test_gradient_flows_through_predictor_but_not_momentum_encoder():
    model = tiny_mocov3()
    views = [torch.randn(4, 3, 32, 32) for _ in range(2)]
    model.loss(views, samples(range(4)))['loss'].backward()
    trainable = [(n, p) for n, p in model.named_parameters()
                 if p.requires_grad]
    assert not [n for n, p in trainable if p.grad is None]
    for module in (model.predictor, model.neck, model.backbone.conv1):
        assert module.weight.grad.abs().sum() > 0 if hasattr(
            module, 'weight') else any(p.grad.abs().sum() > 0
                                       for p in module.parameters())
    assert all(p.grad is None for p in model.momentum_encoder.parameters())


def test_vit_backbone_is_mmpretrains_mocov3_vit():
    """Frozen random patch projection, fixed 2-D sin-cos position
    embedding, class token as feature; every other weight gets a gradient
    (so DDP needs no find_unused_parameters)."""
    from mmpretrain.models.selfsup import MoCoV3ViT
    from mmpretrain.models.utils import build_2d_sincos_position_embedding
    torch.manual_seed(0)
    model = tiny_mocov3(temperature=0.2, vit=True)
    assert type(model.backbone) is MoCoV3ViT
    patch = model.backbone.patch_embed.projection
    assert not patch.weight.requires_grad and not patch.bias.requires_grad
    assert not model.backbone.pos_embed.requires_grad
    assert torch.allclose(
        model.backbone.pos_embed,
        build_2d_sincos_position_embedding(
            patches_resolution=(2, 2), embed_dims=32, cls_token=True))
    # ViT predictor ends with an affine-free BN (official builder)
    assert model.predictor.mlp[-1].weight is None
    patch_before = patch.weight.detach().clone()
    views = [torch.randn(4, 3, 32, 32) for _ in range(2)]
    out = model.loss(views, samples(range(4)))
    q1, k1 = branches(model, views[0])
    q2, k2 = branches(model, views[1])
    labels = torch.arange(4)
    expected = ctr(q1, k2, labels, 0.2) + ctr(q2, k1, labels, 0.2)
    assert out['loss'].item() == pytest.approx(expected.item(), rel=HAND_RTOL)
    out['loss'].backward()
    missing = [
        n for n, p in model.named_parameters()
        if p.requires_grad and p.grad is None
    ]
    assert not missing
    assert patch.weight.grad is None
    assert torch.equal(patch.weight, patch_before)


def test_parity_with_mmpretrain_mocov3_over_sgd_steps():
    """Same weights and inputs: mmpretrain 1.2.0's MoCoV3 and ours give the
    same losses and momentum encoder over SGD steps with the cosine
    momentum schedule. mmpretrain's base_momentum=0.01 is our m=0.99;
    mmpretrain updates its momentum encoder at the start of the next
    forward, ours right after the optimizer step."""
    torch.manual_seed(0)
    ours = tiny_mocov3(temperature=1.0)

    def nonlinear(in_channels, num_layers, last_bn, avg_pool):
        return dict(
            type='NonLinearNeck',
            in_channels=in_channels,
            hid_channels=32,
            out_channels=DIM,
            num_layers=num_layers,
            with_bias=False,
            with_last_bn=last_bn,
            with_last_bn_affine=False,
            with_last_bias=False,
            with_avg_pool=avg_pool,
            norm_cfg=dict(type='BN1d'))

    theirs = MMPretrainMoCoV3(
        backbone=RESNET,
        neck=nonlinear(128, 2, True, True),
        head=dict(
            type='MoCoV3Head',
            predictor=nonlinear(DIM, 2, False, False),
            loss=dict(type='CrossEntropyLoss', loss_weight=2.0),
            temperature=1.0),
        base_momentum=0.01)
    for src, dst in ((ours.backbone, theirs.backbone),
                     (ours.neck, theirs.neck), (ours.predictor,
                                                theirs.head.predictor)):
        # NonLinearNeck's fc0, bn0, fc1, bn1 = our mlp.0, mlp.1, mlp.3...
        dst_state = dst.state_dict()
        assert len(dst_state) == len(src.state_dict())
        for (name, tensor), value in zip(dst_state.items(),
                                         src.state_dict().values()):
            assert tensor.shape == value.shape, name
            tensor.copy_(value)
    # float64, see parity_eps; mmpretrain keeps its EMA step count in an
    # int64 tensor, so pi * steps is a float32 tensor and its cosine
    # momentum carries a float32 rounding (2e-9 relative, 1e-12 in the
    # momentum encoder after one update); a float64 count computes it as
    # exactly as ours
    ours.double(), theirs.double()
    theirs.momentum_encoder.steps = theirs.momentum_encoder.steps.double()

    max_iters = 8
    MessageHub.get_current_instance().update_info('max_iters', max_iters)
    hook = MomentumUpdateHook(momentum=0.99, schedule='cosine')
    hook.attach(ours)

    def sgd(model):
        params = [p for p in model.parameters() if p.requires_grad]
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)

    opt_ours, opt_theirs = sgd(ours), sgd(theirs)
    initial_key = ours.momentum_encoder.neck.mlp[0].weight.detach().clone()
    gen = torch.Generator().manual_seed(1)
    for step in range(4):
        views = [
            torch.randn(8, 3, 32, 32, generator=gen).double() for _ in range(2)
        ]
        loss_ours = ours.loss([v.clone() for v in views], samples(range(8)))
        loss_theirs = theirs.loss([v.clone() for v in views], None)
        eps = parity_eps(loss_ours['loss'])
        assert loss_ours['loss'].item() == pytest.approx(
            loss_theirs['loss'].item(), abs=1024 * eps)
        for opt, loss in ((opt_ours, loss_ours['loss']),
                          (opt_theirs, loss_theirs['loss'])):
            opt.zero_grad()
            loss.backward()
            opt.step()
        # what the hook does after the step of iteration `step`
        hook.update(hook.momentum_at(step + 1, max_iters))
    # mmpretrain applies its pending update in the next forward
    theirs.loss([torch.randn(8, 3, 32, 32).double() for _ in range(2)], None)
    key_ours = list(ours.momentum_encoder.named_parameters())
    key_theirs = list(theirs.momentum_encoder.module.parameters())
    assert len(key_ours) == len(key_theirs)
    for (name, p_ours), p_theirs in zip(key_ours, key_theirs):
        assert torch.allclose(p_ours, p_theirs, rtol=0, atol=256 * eps), name
    # the momentum encoder moved (by ~7e-3, far above the tolerance) and
    # stayed behind the online encoder
    key = ours.momentum_encoder.neck.mlp[0].weight
    assert not torch.allclose(key, initial_key, atol=1e-3)
    assert not torch.allclose(key, ours.neck.mlp[0].weight, atol=1e-4)


def test_plugged_in_queue_replaces_in_batch_negatives():
    torch.manual_seed(0)
    tau = 0.2
    model = tiny_mocov3(
        temperature=tau, queue=dict(type='NegativeKeyQueue', size=32, dim=DIM))
    views = [torch.randn(4, 3, 32, 32) for _ in range(2)]
    queue_before = model.queue.keys.clone()
    out = model.loss(views, samples(range(4)))
    q1, k1 = branches(model, views[0])
    q2, k2 = branches(model, views[1])

    def ctr_queue(q, k):
        q, k = F.normalize(q, dim=1), F.normalize(k, dim=1)
        logits = torch.cat(
            [(q * k).sum(1, keepdim=True), q @ queue_before.t()], dim=1) / tau
        return F.cross_entropy(logits, torch.zeros(
            4, dtype=torch.long)) * (2 * tau)

    expected = ctr_queue(q1, k2) + ctr_queue(q2, k1)
    assert torch.isfinite(out['loss'])
    assert out['loss'].item() == pytest.approx(expected.item(), rel=HAND_RTOL)
    # the loss is differentiable through the query branch only; the keys
    # are written at the next read, after the backward of both terms
    assert torch.equal(model.queue.keys, queue_before)
    out['loss'].backward()
    assert model.predictor.mlp[0].weight.grad.abs().sum() > 0
    # the keys of both views were enqueued, view 1 then view 2
    keys = F.normalize(torch.cat([k1, k2]), dim=1)
    assert torch.equal(model.queue()[:8], keys)  # the same computation
    assert torch.equal(model.queue.keys[8:], queue_before[8:])
    assert int(model.queue.ptr) == 8


def test_queue_with_same_instance_exclusion_needs_and_uses_ids():
    model = tiny_mocov3(
        queue=dict(
            type='NegativeKeyQueue',
            size=32,
            dim=DIM,
            exclude_same_instance=True))
    views = [torch.randn(4, 3, 32, 32) for _ in range(2)]
    model.loss(views, samples([7, 8, 9, 10]))['loss'].backward()
    # both views' keys carry their image's index
    model.queue()
    assert model.queue.ids[:8].tolist() == [7, 8, 9, 10] * 2
    with pytest.raises(ValueError, match='sample_idx'):
        model.loss(views, [DataSample()] * 4)


def test_bad_configs_name_the_field_and_the_fix():
    with pytest.raises(ValueError, match='`predictor` is required'):
        tiny_mocov3(predictor=None)
    # at construction, before any data (test_feature_dims.py has the rest)
    with pytest.raises(
            ValueError,
            match=r'model.queue.dim=7 but model.neck '
            r'outputs 16-d keys .*set model.queue.dim=16'):
        tiny_mocov3(queue=dict(type='NegativeKeyQueue', size=8, dim=7))
    with pytest.raises(ValueError, match='MultiView'):
        tiny_mocov3().loss([torch.randn(2, 3, 32, 32)], None)


def test_second_step_without_the_hook_fails_loudly():
    """train_step outside a Runner, no momentum update: the step after the
    first optimizer step raises, naming the v3 schedule."""
    model = tiny_mocov3()
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1))
    data = dict(
        inputs=[torch.randn(2, 3, 32, 32) for _ in range(2)],
        data_samples=[DataSample() for _ in range(2)])
    model.train_step(data, wrapper)
    with pytest.raises(RuntimeError, match="schedule='cosine'"):
        model.train_step(data, wrapper)


def _two_rank_worker(rank: int, port: int, out_dir: str):
    import torch.distributed as dist
    join_gloo_group(rank, port)
    torch.manual_seed(0)
    model = tiny_mocov3(temperature=0.2)
    views = torch.randn(2, 2, 4, 3, 32, 32)  # [view][rank]: same on ranks
    out = model.loss([views[0, rank], views[1, rank]], samples(range(4)))
    out['loss'].backward()
    torch.save(
        dict(
            loss=out['loss'].detach(),
            acc=out['contrast_acc'],
            grad=model.predictor.mlp[0].weight.grad),
        os.path.join(out_dir, f'{rank}.pth'))
    dist.destroy_process_group()


def test_in_batch_negatives_gathered_across_two_ranks(tmp_path):
    """On 2 gloo ranks each query is contrasted with the keys of the whole
    global batch (8), its positive at index i + N * rank: the official
    CE(q k_all^T / tau, arange(N) + N * rank) * 2 tau, both terms."""
    run_two_ranks(_two_rank_worker, free_port(), str(tmp_path))
    tau = 0.2
    torch.manual_seed(0)
    model = tiny_mocov3(temperature=tau)
    views = torch.randn(2, 2, 4, 3, 32, 32)
    # every rank's BN sees its own 4 images: encode each rank separately
    q1, k1 = zip(*[branches(model, views[0, r]) for r in range(2)])
    q2, k2 = zip(*[branches(model, views[1, r]) for r in range(2)])
    k1_all, k2_all = torch.cat(k1), torch.cat(k2)
    for rank in range(2):
        labels = torch.arange(4) + 4 * rank
        expected = (
            ctr(q1[rank], k2_all, labels, tau) +
            ctr(q2[rank], k1_all, labels, tau))
        result = torch.load(tmp_path / f'{rank}.pth')
        # the rank ran the networks on the same 4 images with the same
        # kernels and thread count (tests/conftest.py): only the loss
        # computation differs (HAND_RTOL)
        assert result['loss'].item() == pytest.approx(
            expected.item(), rel=HAND_RTOL), rank
        # the offset matters: rank 1 with labels arange(4) is another value
        wrong = (
            ctr(q1[rank], k2_all, torch.arange(4), tau) +
            ctr(q2[rank], k1_all, torch.arange(4), tau))
        assert rank == 0 or abs(wrong.item() - expected.item()) > 1e-2
        # and so do the other rank's keys: local negatives only differ
        local = (
            ctr(q1[rank], k2[rank], torch.arange(4), tau) +
            ctr(q2[rank], k1[rank], torch.arange(4), tau))
        assert abs(local.item() - expected.item()) > 1e-3
    # each rank's gradient comes from its own queries (DDP averages them)
    grads = [torch.load(tmp_path / f'{r}.pth')['grad'] for r in range(2)]
    assert not torch.allclose(grads[0], grads[1])
