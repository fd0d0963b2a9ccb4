# Copyright (c) mocoplug contributors. All rights reserved.
import copy
import os

import pytest
import torch
import torch.nn.functional as F
from mmengine.optim import OptimWrapper
from mmpretrain.models.selfsup import MoCo as MMPretrainMoCo
from mmpretrain.models.utils import batch_shuffle_ddp, batch_unshuffle_ddp
from mmpretrain.structures import DataSample

import mocoplug.models.algorithms.moco as moco_module
from mocoplug.engine.hooks import MomentumUpdateHook
from mocoplug.models import MoCo, SplitBatchNorm
from ...gloo import free_port, join_gloo_group, run_two_ranks

BACKBONE = dict(
    type='ResNet',
    depth=18,
    stem_channels=16,
    base_channels=16,
    out_indices=(3, ))


def tiny_moco(**kwargs):
    cfg = dict(
        backbone=BACKBONE,
        neck=dict(
            type='MoCoProjectionNeck',
            in_channels=128,
            hid_channels=128,
            out_channels=32),
        head=dict(type='InfoNCEHead', temperature=0.2),
        queue=dict(type='NegativeKeyQueue', size=64, dim=32),
        shuffle_bn='none')
    cfg.update(kwargs)
    model = MoCo(**cfg)
    model.init_weights()
    return model


def samples(ids):
    return [DataSample(metainfo=dict(sample_idx=int(i))) for i in ids]


# Against a hand computation: the network outputs are the same tensors on
# both sides (same modules, inputs and process), only the loss differs.
# For unit vectors of C channels, K negatives and temperature t each side
# is within L = (2 (C + 2) / t + K + 3) u of the exact loss (worst case, any
# summation order; tests/models/utils/test_fused_info_nce.py): 2.4e-5 for
# C = 32, K = 64, t = 0.2, u = 2^-24, so the two differ by < 5e-5, < 1e-4
# of the losses here (1.5, 1.9). rel=1e-5 was below that bound.
HAND_RTOL = 1e-4


def parity_eps(loss: torch.Tensor) -> float:
    """The unit of the tolerances of ours vs mmpretrain's model, both in
    float64, over SGD steps.

    The two do the same arithmetic in other orders. Our loss is computed in
    the dtype of its similarities (float32 while the embeddings are cast to
    float32, float64 otherwise), hence tolerances in that dtype's eps:
    - a loss is within 2 L (see HAND_RTOL, with u = eps) ~ 820 eps of
      mmpretrain's (C = 32, K = 64, t = 0.2), plus the drift below:
      abs=1024 eps;
    - over these 4-5 steps the weights, keys and queue drifted apart by at
      most 25 eps, measured in float32, and in float64 with float64
      similarities (the amplification is the model's and the data's, not
      the CPU's): atol=256 eps."""
    assert loss.dtype in (torch.float32, torch.float64)
    return torch.finfo(loss.dtype).eps


def test_encoders_start_equal_and_key_encoder_is_frozen():
    model = tiny_moco()
    for (online, momentum) in model.momentum_pairs():
        for a, b in zip(online.state_dict().values(),
                        momentum.state_dict().values()):
            assert torch.equal(a, b)
    assert not any(p.requires_grad
                   for p in model.momentum_encoder.parameters())
    keys = model.state_dict().keys()
    assert any(k.startswith('momentum_encoder.backbone.') for k in keys)
    assert {'queue.keys', 'queue.ptr'} <= set(keys)


def test_tensor_mode_extracts_backbone_features():
    model = tiny_moco()
    feats = model(torch.randn(2, 3, 32, 32), mode='tensor')
    assert len(feats) == 1 and feats[0].shape == (2, 128, 1, 1)


def test_loss_equals_a_hand_computation():
    torch.manual_seed(0)
    model = tiny_moco()
    im_q, im_k = torch.randn(4, 3, 32, 32), torch.randn(4, 3, 32, 32)
    queue_before = model.queue.keys.clone()
    out = model.loss([im_q, im_k], samples(range(4)))
    with torch.no_grad():
        q = F.normalize(model.neck(model.backbone(im_q))[0], dim=1)
        k = F.normalize(model.momentum_encoder(im_k)[0], dim=1)
        logits = torch.cat(
            [(q * k).sum(1, keepdim=True), q @ queue_before.t()], 1) / 0.2
        expected = F.cross_entropy(logits, torch.zeros(4, dtype=torch.long))
    assert out['loss'].item() == pytest.approx(expected.item(), rel=HAND_RTOL)
    # the batch's keys enter the queue at the next read, after the backward
    # that needs the keys the loss read (no copy of the queue)
    assert torch.equal(model.queue.keys, queue_before)
    out['loss'].backward()
    assert torch.equal(model.queue()[:4], k)  # the same tensor's values
    assert int(model.queue.ptr) == 4


def test_parity_with_mmpretrain_moco_over_sgd_steps():
    """Same weights, inputs and queue: mmpretrain 1.2.0's MoCo and ours give
    the same losses and key encoder over several SGD steps. mmpretrain's
    momentum=0.001 is our m=0.999 (opposite conventions)."""
    torch.manual_seed(0)
    ours = tiny_moco()
    theirs = MMPretrainMoCo(
        backbone=BACKBONE,
        neck=dict(
            type='MoCoV2Neck',
            in_channels=128,
            hid_channels=128,
            out_channels=32),
        head=dict(
            type='ContrastiveHead',
            loss=dict(type='CrossEntropyLoss'),
            temperature=0.2),
        queue_len=64,
        feat_dim=32,
        momentum=0.001)
    theirs.backbone.load_state_dict(ours.backbone.state_dict())
    theirs.neck.load_state_dict(ours.neck.state_dict())
    theirs.queue.copy_(ours.queue.keys.t())
    ours.double(), theirs.double()  # see parity_eps
    hook = MomentumUpdateHook(momentum=0.999)
    hook.attach(ours)

    def sgd(model):
        params = [p for p in model.parameters() if p.requires_grad]
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)

    opt_ours, opt_theirs = sgd(ours), sgd(theirs)
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        views = [
            torch.randn(8, 3, 32, 32, generator=gen).double() for _ in range(2)
        ]
        loss_ours = ours.loss([v.clone() for v in views], samples(range(8)))
        loss_theirs = theirs.loss([v.clone() for v in views], None)
        eps = parity_eps(loss_ours['loss'])
        assert loss_ours['loss'].item() == pytest.approx(
            loss_theirs['loss'].item(), abs=1024 * eps)
        for model, opt, loss in ((ours, opt_ours, loss_ours['loss']),
                                 (theirs, opt_theirs, loss_theirs['loss'])):
            opt.zero_grad()
            loss.backward()
            opt.step()
        hook.update(0.999)
    # mmpretrain updates its key encoder at the start of the next forward;
    # ours right after the step: one more forward brings them level.
    theirs.loss([torch.randn(8, 3, 32, 32).double() for _ in range(2)], None)
    key_ours = dict(ours.momentum_encoder.named_parameters())
    key_theirs = dict(theirs.encoder_k.module.named_parameters())
    assert len(key_ours) == len(key_theirs)
    for (name, p_ours), p_theirs in zip(key_ours.items(), key_theirs.values()):
        assert torch.allclose(p_ours, p_theirs, rtol=0, atol=256 * eps), name
    # the key encoder really moved away from its initial weights
    assert not torch.allclose(ours.momentum_encoder.neck.mlp[0].weight,
                              tiny_moco().neck.mlp[0].weight.double())


def sgd(model):
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)


def test_queue_after_each_step_equals_mmpretrains():
    """The queue is read without a copy and each batch's keys are written
    once its backward has run: the losses and the queue after every SGD step
    are those of mmpretrain 1.2.0's MoCo (copy, then immediate enqueue)."""
    torch.manual_seed(0)
    ours = tiny_moco(queue=dict(type='NegativeKeyQueue', size=24, dim=32))
    theirs = MMPretrainMoCo(
        backbone=BACKBONE,
        neck=dict(
            type='MoCoV2Neck',
            in_channels=128,
            hid_channels=128,
            out_channels=32),
        head=dict(
            type='ContrastiveHead',
            loss=dict(type='CrossEntropyLoss'),
            temperature=0.2),
        queue_len=24,
        feat_dim=32,
        momentum=0.001)
    theirs.backbone.load_state_dict(ours.backbone.state_dict())
    theirs.neck.load_state_dict(ours.neck.state_dict())
    theirs.queue.copy_(ours.queue.keys.t())
    ours.double(), theirs.double()  # see parity_eps
    hook = MomentumUpdateHook(momentum=0.999)
    hook.attach(ours)
    opt_ours, opt_theirs = sgd(ours), sgd(theirs)
    gen = torch.Generator().manual_seed(1)
    for step in range(5):  # 5 x 8 keys into 24 slots: wraps around
        views = [
            torch.randn(8, 3, 32, 32, generator=gen).double() for _ in range(2)
        ]
        loss_ours = ours.loss([v.clone() for v in views], samples(range(8)))
        loss_theirs = theirs.loss([v.clone() for v in views], None)
        eps = parity_eps(loss_ours['loss'])
        assert loss_ours['loss'].item() == pytest.approx(
            loss_theirs['loss'].item(), abs=1024 * eps), step
        for opt, loss in ((opt_ours, loss_ours['loss']),
                          (opt_theirs, loss_theirs['loss'])):
            opt.zero_grad()
            loss.backward()
            opt.step()
        hook.update(0.999)
        assert torch.allclose(
            ours.queue(), theirs.queue.t(), rtol=0, atol=256 * eps), step
        assert int(ours.queue.ptr) == int(theirs.queue_ptr) == \
            (step + 1) * 8 % 24


def test_state_dict_between_steps_resumes_exactly(on_device, deterministic):
    """A model saved after a training step and loaded into a fresh one
    continues bit for bit (queue with instance ids, split Shuffle BN); a
    state taken between a loss and its backward already holds the batch's
    keys."""

    def build():
        return tiny_moco(
            queue=dict(
                type='NegativeKeyQueue',
                size=20,
                dim=32,
                exclude_same_instance=True),
            shuffle_bn='split',
            num_splits=2)

    gen = torch.Generator().manual_seed(3)
    batches = [[
        torch.randn(8, 3, 32, 32, generator=gen, device='cpu').to(on_device)
        for _ in range(2)
    ] for _ in range(5)]

    def step(model, opt, hook, i, check_mid_state=False):
        torch.manual_seed(100 + i)  # the Shuffle BN permutation
        out = model.loss([v.clone() for v in batches[i]],
                         samples(range(8 * i, 8 * i + 8)))
        mid = model.state_dict() if check_mid_state else None
        opt.zero_grad()
        out['loss'].backward()
        opt.step()
        hook.update(0.999)
        if mid is not None:
            after = model.state_dict()
            for name in ('queue.keys', 'queue.ptr', 'queue.ids'):
                assert torch.equal(mid[name], after[name]), name
        return out['loss'].detach()

    torch.manual_seed(0)
    model = build()
    opt, hook = sgd(model), MomentumUpdateHook(momentum=0.999)
    hook.attach(model)
    for i in range(3):
        step(model, opt, hook, i, check_mid_state=i == 2)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    opt_state = copy.deepcopy(opt.state_dict())

    torch.manual_seed(42)  # other initial weights and queue
    resumed = build()
    resumed.load_state_dict(state)
    opt_resumed = sgd(resumed)
    opt_resumed.load_state_dict(opt_state)
    hook_resumed = MomentumUpdateHook(momentum=0.999)
    hook_resumed.attach(resumed)
    for i in range(3, 5):
        assert torch.equal(
            step(model, opt, hook, i),
            step(resumed, opt_resumed, hook_resumed, i)), i
    final, final_resumed = model.state_dict(), resumed.state_dict()
    assert final.keys() == final_resumed.keys()
    for name, value in final.items():
        assert torch.equal(value, final_resumed[name]), name


def test_exclude_same_instance_masks_older_keys_of_the_same_image(on_device):
    torch.manual_seed(0)
    model = tiny_moco(
        queue=dict(
            type='NegativeKeyQueue',
            size=64,
            dim=32,
            exclude_same_instance=True))
    views = [torch.randn(4, 3, 32, 32) for _ in range(2)]
    # a training step's keys are in the queue once its backward has run
    model.loss(views, samples([0, 1, 2, 3]))['loss'].backward()
    queue_before = model.queue().clone()
    out = model.loss(views, samples([2, 3, 4, 5]))
    out['loss'].backward()
    with torch.no_grad():
        q = F.normalize(model.neck(model.backbone(views[0]))[0], dim=1)
        k = F.normalize(model.momentum_encoder(views[1])[0], dim=1)
        losses = []
        for i, image in enumerate([2, 3, 4, 5]):
            # slots 0..3 hold the previous keys of images 0..3
            keep = [j for j in range(64) if not (j < 4 and j == image)]
            logits = torch.cat([(q[i] * k[i]).sum().view(1),
                                queue_before[keep] @ q[i]]) / 0.2
            losses.append(-F.log_softmax(logits, 0)[0])
    assert out['loss'].item() == pytest.approx(
        torch.stack(losses).mean().item(), rel=HAND_RTOL)
    model.queue()
    assert model.queue.ids[4:8].tolist() == [2, 3, 4, 5]


def test_exclude_same_instance_needs_sample_idx():
    model = tiny_moco(
        queue=dict(
            type='NegativeKeyQueue',
            size=64,
            dim=32,
            exclude_same_instance=True))
    with pytest.raises(ValueError, match='sample_idx'):
        model.loss([torch.randn(2, 3, 32, 32)] * 2, [DataSample()] * 2)


def test_split_shuffle_bn_converts_both_encoders_and_unshuffles_keys(
        on_device):
    torch.manual_seed(0)
    model = tiny_moco(shuffle_bn='split', num_splits=2)
    assert type(model.backbone.bn1) is SplitBatchNorm
    assert type(model.momentum_encoder.backbone.bn1) is SplitBatchNorm
    images = torch.randn(8, 3, 32, 32)
    torch.manual_seed(5)
    keys = model.encode_keys(images)
    torch.manual_seed(5)
    perm = torch.randperm(8)
    with torch.no_grad():
        shuffled = F.normalize(model.momentum_encoder(images[perm])[0], dim=1)
    expected = torch.empty_like(shuffled)
    expected[perm] = shuffled
    # the same encoder on the same permuted batch: the same kernels
    assert torch.equal(keys, expected)
    # the shuffle matters: without it the slices hold other images
    with torch.no_grad():
        unshuffled = F.normalize(model.momentum_encoder(images)[0], dim=1)
    assert not torch.allclose(keys, unshuffled, atol=1e-4)


CHOOSE = ("'ddp' on several GPUs/processes, 'split' on one GPU or CPU, "
          "'none' only with SyncBN or no BN")


def test_bad_configs_name_the_field():
    with pytest.raises(ValueError) as error:
        tiny_moco(shuffle_bn='sync')
    assert str(error.value) == ("MoCo: shuffle_bn must be one of ('ddp', "
                                f"'split', 'none'), got 'sync': {CHOOSE}")
    with pytest.raises(ValueError) as error:
        tiny_moco(
            backbone=dict(BACKBONE, norm_cfg=dict(type='GN', num_groups=4)),
            shuffle_bn='split')
    assert str(error.value) == ("MoCo: shuffle_bn='split' found no "
                                f'BatchNorm: {CHOOSE}')
    model = tiny_moco()
    with pytest.raises(ValueError, match='MultiView'):
        model.loss(torch.randn(2, 3, 32, 32), None)


def test_ddp_shuffle_bn_in_one_process_warns_once_with_the_choice(monkeypatch):
    logged = []
    monkeypatch.setattr(
        moco_module,
        'print_log',
        lambda msg, logger=None, level=20: logged.append(msg))
    model = tiny_moco(shuffle_bn='ddp')
    for _ in range(2):
        model.encode_keys(torch.randn(2, 3, 32, 32))
    assert logged == [
        f"MoCo: shuffle_bn='ddp' does nothing in one process: {CHOOSE}"
    ]


@pytest.mark.parametrize('fused', [False, True])
def test_second_step_without_the_hook_fails_loudly(fused):
    """train_step outside a Runner: the step after an optimizer step that
    left the key encoder frozen raises; with the update it trains on. A
    fused optimizer (which leaves torch's in-place counters alone) too."""
    data = dict(
        inputs=[torch.randn(2, 3, 32, 32) for _ in range(2)],
        data_samples=samples(range(2)))
    for update in (False, True):
        model = tiny_moco()
        wrapper = OptimWrapper(
            torch.optim.SGD(model.parameters(), lr=0.1, fused=fused))
        hook = MomentumUpdateHook(momentum=0.99)
        hook.attach(model)
        model.train_step(data, wrapper)
        if update:
            hook.update(0.99)
            model.train_step(data, wrapper)
            model.train_step(data, wrapper)  # checked once, then not again
        else:
            with pytest.raises(RuntimeError, match='MomentumUpdateHook'):
                model.train_step(data, wrapper)


def _shuffle_bn_worker(rank: int, port: int, out_dir: str):
    import torch.distributed as dist
    join_gloo_group(rank, port)
    torch.manual_seed(0)
    model = tiny_moco(shuffle_bn='ddp')
    images = torch.randn(2, 4, 3, 32, 32)  # same on both ranks
    torch.manual_seed(123)
    keys = model.encode_keys(images[rank])
    # mmpretrain 1.2.0's Shuffle BN with the same draw, for parity
    torch.manual_seed(123)
    shuffled, unshuffle = batch_shuffle_ddp(images[rank])
    with torch.no_grad():
        theirs = batch_unshuffle_ddp(
            F.normalize(model.momentum_encoder(shuffled)[0], dim=1), unshuffle)
    torch.save(
        dict(
            keys=keys,
            mmpretrain_keys=theirs,
            state=model.momentum_encoder.state_dict()),
        os.path.join(out_dir, f'{rank}.pth'))
    dist.destroy_process_group()


def test_ddp_shuffle_bn_on_two_ranks(tmp_path):
    """Each rank encodes a shuffled half of the global key batch and gets
    back the keys of its own images, in order."""
    run_two_ranks(_shuffle_bn_worker, free_port(), str(tmp_path))
    torch.manual_seed(0)
    model = tiny_moco(shuffle_bn='ddp')
    images = torch.randn(2, 4, 3, 32, 32).view(8, 3, 32, 32)
    torch.manual_seed(123)
    perm = torch.randperm(8)  # rank 0 draws it and broadcasts it
    with torch.no_grad():
        halves = [
            F.normalize(model.momentum_encoder(images[perm[:4]])[0], dim=1),
            F.normalize(model.momentum_encoder(images[perm[4:]])[0], dim=1)
        ]
    expected = torch.empty(8, 32)
    expected[perm] = torch.cat(halves)
    for rank in range(2):
        result = torch.load(tmp_path / f'{rank}.pth')
        keys = result['keys']
        # each rank ran the same encoder on the same 4 images as above with
        # the same kernels and thread count (tests/conftest.py): the same
        # values (1e-5 is a margin of 100 float32 ulps of a unit vector)
        assert torch.allclose(keys, expected[4 * rank:4 * rank + 4], atol=1e-5)
        # the permutation is mmpretrain's draw (rank 0's randperm of the
        # global batch), so the keys are those of its batch_shuffle_ddp:
        # the same images through the same encoder, bit for bit
        assert torch.equal(keys, result['mmpretrain_keys'])


def test_the_key_encoder_check_reads_live_counters_under_compile():
    """mmengine's compile=True compiles train_step: traced, the check read
    the version counters once and raised 'nothing updates the momentum
    encoder' with the hook in place (issue 37). It runs eagerly: a moved
    key encoder passes, a frozen one after an optimizer step raises."""
    for update in (True, False):
        model = tiny_moco()
        check = torch.compile(
            model.check_key_encoder_moves, backend='aot_eager')
        check()  # the counters at the start
        model._optimizer_stepped = True
        if update:
            hook = MomentumUpdateHook(momentum=0.99)
            hook.attach(model)
            hook.update(0.99)
            check()
            assert model._key_encoder_seen_moving
        else:
            with pytest.raises(RuntimeError, match='MomentumUpdateHook'):
                check()
