# Copyright (c) mocoplug contributors. All rights reserved.
"""The shipped MoCo v3 configs: their recipe against the paper's code, and
one real training run of each on CPU at a tiny size (32 px images of
scikit-learn's digits, batch 4), keeping everything else of the config."""
import copy
import math
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.optim import build_optim_wrapper
from mmengine.registry import init_default_scope
from mmengine.runner import Runner
from torch.nn.modules.batchnorm import _BatchNorm

from mocoplug.registry import MODELS
from mocoplug.utils import fill_pretrained

CONFIGS = osp.join(osp.dirname(__file__), '..', '..', 'configs')
R50 = 'mocov3/mocov3_r50_8xb512-amp-coslr-100e_in1k.py'
VIT_S = 'mocov3/mocov3_vit-small-p16_16xb256-amp-coslr-300e_in1k.py'
VIT_B = 'mocov3/mocov3_vit-base-p16_16xb256-amp-coslr-300e_in1k.py'
LINEAR = {
    R50: 'benchmarks/linear_mocov3-r50_8xb128-coslr-90e_in1k.py',
    VIT_S: 'benchmarks/linear_mocov3-vit-small-p16_8xb128-coslr-90e_in1k.py',
    VIT_B: 'benchmarks/linear_mocov3-vit-base-p16_8xb128-coslr-90e_in1k.py',
}
IDS = ['r50', 'vit-s', 'vit-b']
SIZE = 32  # images; 2 x 2 patches of 16 for the ViTs
BATCH = 4
ITERS = 2


def load(name: str) -> Config:
    return Config.fromfile(osp.join(CONFIGS, name))


# --------------------------------------------------------------------------
# The recipe of every config, as in the paper's code
# --------------------------------------------------------------------------


def views(cfg):
    multiview = cfg.train_dataloader.dataset.pipeline[1]
    assert multiview.type == 'MultiView' and multiview.num_views == [1, 1]
    return [{t.type: t for t in view} for view in multiview.transforms]


@pytest.mark.parametrize(
    'name,crop_min', [(R50, 0.2), (VIT_S, 0.08), (VIT_B, 0.08)], ids=IDS)
def test_asymmetric_views(name, crop_min):
    """BYOL's two views: blur 1.0 / 0.1, solarize 0 / 0.2; crop scale from
    --crop-min (0.2 in the R50 command, default 0.08 for ViT)."""
    view1, view2 = views(load(name))
    for view in (view1, view2):
        assert view['RandomResizedCrop'].crop_ratio_range == (crop_min, 1.)
        assert view['RandomResizedCrop'].scale == 224
        assert view['RandomApply'].prob == 0.8
        jitter = view['RandomApply'].transforms[0]
        assert (jitter.brightness, jitter.contrast, jitter.saturation,
                jitter.hue) == (0.4, 0.4, 0.2, 0.1)
        assert view['RandomGrayscale'].prob == 0.2
        assert view['GaussianBlur'].magnitude_range == (0.1, 2.0)
        assert view['RandomFlip'].prob == 0.5
    assert (view1['GaussianBlur'].prob, view2['GaussianBlur'].prob) == (1., .1)
    assert (view1['Solarize'].prob, view2['Solarize'].prob) == (0., .2)


@pytest.mark.parametrize(
    'name,tau,batch,embed,proj_layers,pred_last_bn', [
        (R50, 1.0, 8 * 512, 2048, 2, False),
        (VIT_S, 0.2, 16 * 256, 384, 3, True),
        (VIT_B, 0.2, 16 * 256, 768, 3, True),
    ],
    ids=IDS)
def test_model_and_momentum(name, tau, batch, embed, proj_layers,
                            pred_last_bn):
    cfg = load(name)
    gpus = int(name.split('_')[2].split('xb')[0])
    assert gpus * cfg.train_dataloader.batch_size == batch
    model = cfg.model
    assert model.type == 'MoCoV3' and model.get('queue') is None
    assert model.head.temperature == tau
    assert model.head.loss.loss_weight == pytest.approx(2 * tau)
    neck, pred = model.neck, model.predictor
    assert (neck.in_channels, neck.hid_channels, neck.out_channels,
            neck.num_layers) == (embed, 4096, 256, proj_layers)
    assert (pred.in_channels, pred.hid_channels, pred.out_channels,
            pred.num_layers) == (256, 4096, 256, 2)
    for mlp in (neck, pred):
        assert not mlp.with_bias and mlp.with_bn
        assert mlp.norm_cfg.type == 'SyncBN'
    assert neck.with_last_bn and not neck.with_last_bn_affine
    assert pred.with_last_bn == pred_last_bn
    if name == R50:
        assert model.backbone.norm_cfg.type == 'SyncBN'
        assert model.backbone.zero_init_residual
    else:
        assert model.backbone.type == 'MoCoV3ViT'
        assert model.backbone.stop_grad_conv1
        assert model.backbone.patch_size == 16
    assert cfg.custom_hooks == [
        dict(type='MomentumUpdateHook', momentum=0.99, schedule='cosine')
    ]
    assert cfg.auto_scale_lr.base_batch_size == batch


def test_r50_schedule_lars_0_6_per_256():
    cfg = load(R50)
    opt = cfg.optim_wrapper.optimizer
    # the MoCo v3 authors' LARS, 1-D parameters excluded by shape by the
    # optimizer itself (tests/engine/optimizers/test_mocov3_lars.py)
    assert 'constructor' not in cfg.optim_wrapper
    assert opt.type == 'MoCoV3LARS' and opt.momentum == 0.9
    assert opt.get('eta', 1e-3) == 1e-3
    assert opt.lr == pytest.approx(0.6 * 4096 / 256)
    assert opt.weight_decay == 1e-6
    warmup, cosine = cfg.param_scheduler
    assert (warmup.type, warmup.end, cosine.begin, cosine.end) == \
        ('LinearLR', 10, 10, 100)
    assert cfg.train_cfg.max_epochs == 100


@pytest.mark.parametrize('name', [VIT_S, VIT_B], ids=IDS[1:])
def test_vit_schedule_adamw_1_5e_4_per_256(name):
    cfg = load(name)
    opt = cfg.optim_wrapper.optimizer
    assert opt.type == 'AdamW'
    assert opt.lr == pytest.approx(1.5e-4 * 4096 / 256)
    assert opt.weight_decay == 0.1
    assert opt.betas == (0.9, 0.999)  # torch.optim.AdamW's, as official
    warmup, cosine = cfg.param_scheduler
    assert (warmup.end, cosine.begin, cosine.end) == (40, 40, 300)
    assert cfg.train_cfg.max_epochs == 300


@pytest.mark.parametrize(
    'name,lr',
    [(LINEAR[R50], 0.1 * 1024 / 256), (LINEAR[VIT_S], 3 * 1024 / 256),
     (LINEAR[VIT_B], 3 * 1024 / 256)],
    ids=IDS)
def test_linear_schedule(name, lr):
    cfg = load(name)
    assert 8 * cfg.train_dataloader.batch_size == 1024
    opt = cfg.optim_wrapper.optimizer
    assert (opt.type, opt.momentum, opt.weight_decay) == ('SGD', 0.9, 0.)
    assert opt.lr == pytest.approx(lr)
    assert cfg.auto_scale_lr.base_batch_size == 1024
    assert cfg.param_scheduler == [
        dict(
            type='CosineAnnealingLR', T_max=90, by_epoch=True, begin=0, end=90)
    ]
    assert cfg.train_cfg.max_epochs == 90
    assert cfg.pretrained is None
    assert cfg.model.backbone.init_cfg == dict(
        type='Pretrained',
        _scope_='mocoplug',
        checkpoint=None,
        prefix='backbone.')


# --------------------------------------------------------------------------
# LARS: 1-D parameters get no weight decay and no adaptation
# --------------------------------------------------------------------------

# the config's documented switch to mmpretrain's LARS
MMPRETRAIN_LARS = {
    'optim_wrapper.optimizer.type': 'LARS',
    'optim_wrapper.constructor': 'LARSOptimWrapperConstructor',
}


def r50_model_and_optimizer(paramwise_cfg=None,
                            constructor=True,
                            mmpretrain_lars=True):
    init_default_scope('mocoplug')
    cfg = load(R50)
    if mmpretrain_lars:
        cfg.merge_from_dict(MMPRETRAIN_LARS)
    model = MODELS.build(cfg.model)
    wrapper_cfg = copy.deepcopy(cfg.optim_wrapper)
    wrapper_cfg.type = 'OptimWrapper'
    wrapper_cfg.pop('loss_scale')
    if not constructor:
        wrapper_cfg.pop('constructor')
    if paramwise_cfg is not None:
        wrapper_cfg.paramwise_cfg = paramwise_cfg
    return model, build_optim_wrapper(model, wrapper_cfg).optimizer


def test_r50_config_builds_mocov3_lars_over_one_group():
    """As shipped: one group of every parameter (the frozen momentum
    encoder gets no gradient, so no update), weight decay 1e-6; the BN
    parameters a name-based rule would miss are 1-D, which MoCoV3LARS
    excludes by shape."""
    from mocoplug.engine.optimizers import MoCoV3LARS
    model, optimizer = r50_model_and_optimizer(mmpretrain_lars=False)
    assert isinstance(optimizer, MoCoV3LARS)
    (group, ) = optimizer.param_groups
    assert group['params'] == list(model.parameters())
    assert (group['lr'], group['momentum'], group['weight_decay'],
            group['eta']) == (9.6, 0.9, 1e-6, 1e-3)
    assert not any(p.requires_grad
                   for p in model.momentum_encoder.parameters())
    named = dict(model.named_parameters())
    for name in ('neck.mlp.1.weight', 'neck.mlp.1.bias',
                 'predictor.mlp.1.weight', 'predictor.mlp.1.bias',
                 'backbone.layer1.0.downsample.1.weight',
                 'backbone.bn1.weight'):
        assert named[name].ndim == 1, name


def groups_by_param(optimizer):
    return {id(p): g for g in optimizer.param_groups for p in g['params']}


def test_mmpretrain_lars_switch_excludes_every_1d_param():
    """The config's switch to mmpretrain's LARS: LARSOptimWrapperConstructor
    puts every 1-D parameter in an excluded group."""
    model, optimizer = r50_model_and_optimizer()
    groups = groups_by_param(optimizer)
    named = dict(model.named_parameters())
    # the momentum encoder (and nothing else) stays out of the optimizer
    assert {n
            for n, p in named.items() if id(p) not in groups
            } == {n
                  for n in named if n.startswith('momentum_encoder.')}
    for name, param in named.items():
        if name.startswith('momentum_encoder.'):
            continue
        group = groups[id(param)]
        if param.ndim <= 1:
            assert group['weight_decay'] == 0. and group['lars_exclude'], name
        else:
            assert group['weight_decay'] == 1e-6, name
            assert not group.get('lars_exclude', False), name
    # those a name-based rule ('bn', 'bias', 'downsample.1') would miss
    for name in ('neck.mlp.1.weight', 'neck.mlp.1.bias',
                 'predictor.mlp.1.weight', 'predictor.mlp.1.bias',
                 'backbone.layer1.0.downsample.1.weight',
                 'backbone.bn1.weight'):
        assert groups[id(named[name])]['lars_exclude'], name


def test_name_based_custom_keys_miss_the_mlp_bn():
    """Why the constructor: mmpretrain's own MoCo v3 keys leave the
    projector's and predictor's BN gamma decayed and LARS-adapted."""
    model, optimizer = r50_model_and_optimizer(
        paramwise_cfg=dict(
            custom_keys={
                'bn': dict(decay_mult=0, lars_exclude=True),
                'bias': dict(decay_mult=0, lars_exclude=True),
                'downsample.1': dict(decay_mult=0, lars_exclude=True),
            }),
        constructor=False)
    groups = groups_by_param(optimizer)
    named = dict(model.named_parameters())
    for name in ('neck.mlp.1.weight', 'predictor.mlp.1.weight'):
        group = groups[id(named[name])]
        assert group['weight_decay'] == 1e-6, name
        assert not group.get('lars_exclude', False), name


def test_lars_step_adapts_and_decays_weights_only():
    """One LARS step by hand: weights get (g + wd w) scaled by the trust
    ratio eta ||w|| / (||g|| + wd ||w||); 1-D parameters plain lr * g."""
    from mocoplug.engine.optimizers import LARSOptimWrapperConstructor
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5),
        torch.nn.Linear(5, 3, bias=False)).double()
    lr, wd, eta = 0.5, 0.1, 1e-3
    optimizer = LARSOptimWrapperConstructor(
        dict(
            optimizer=dict(
                type='LARS', lr=lr, momentum=0.9, weight_decay=wd, eta=eta)))(
                    model).optimizer
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    for p, w in zip(model.parameters(), before):
        g = p.grad
        if p.ndim > 1:
            trust = eta * w.norm() / (g.norm() + wd * w.norm())
            expected = w - lr * trust * (g + wd * w)
        else:
            expected = w - lr * g
        # float64: norms of <= 30 elements and a few more operations, each
        # side within 40 x 2^-53 x (|w| + lr |g|) < 1e-14 of the exact value
        # (in float32 that bound, 5e-6, exceeds the old atol=1e-7 + 1e-5
        # |expected| wherever the expected weight is near 0)
        assert torch.allclose(p, expected, rtol=0, atol=1e-12)


def test_lars_constructor_refuses_another_optimizer():
    from mocoplug.engine.optimizers import LARSOptimWrapperConstructor
    with pytest.raises(ValueError, match='flat_decay_mult'):
        LARSOptimWrapperConstructor(
            dict(optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4)))


# --------------------------------------------------------------------------
# Every config trains on CPU at a tiny size
# --------------------------------------------------------------------------


def tiny_pipeline(pipeline):
    """The config's pipeline on in-memory 32 px images: no file loading,
    crops and resizes to 32 px; every other transform as shipped."""
    out = []
    for transform in copy.deepcopy(pipeline):
        kind = transform['type']
        if kind == 'LoadImageFromFile':
            continue
        if kind == 'MultiView':
            transform['transforms'] = [
                tiny_pipeline(view) for view in transform['transforms']
            ]
        elif kind in ('RandomResizedCrop', 'ResizeEdge'):
            transform['scale'] = SIZE
        elif kind == 'CenterCrop':
            transform['crop_size'] = SIZE
        out.append(transform)
    return out


def tiny(cfg, work_dir, pretraining):
    """Run the config on CPU: digits instead of ImageNet, 32 px, batch 4,
    one epoch of 2 iterations, no AMP (it needs a GPU), no checkpoints.
    SyncBN stays in the config: the Runner reverts it to BN in a
    non-distributed run."""
    cfg = copy.deepcopy(cfg)
    cfg.work_dir = str(work_dir)
    cfg.experiment_name = osp.basename(str(work_dir))
    cfg.log_level = 'WARNING'
    cfg.randomness = dict(seed=0)
    if cfg.optim_wrapper.type == 'AmpOptimWrapper':
        cfg.optim_wrapper.type = 'OptimWrapper'
        cfg.optim_wrapper.pop('loss_scale', None)
    for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader = cfg.get(field)
        if not loader:
            continue
        train = field == 'train_dataloader'
        loader.dataset = dict(
            type='DigitsDataset',
            split='train' if train else 'test',
            with_label=not (train and pretraining),
            img_size=SIZE,
            indices=BATCH * ITERS if train else BATCH,
            pipeline=tiny_pipeline(loader.dataset.pipeline))
        loader.update(
            batch_size=BATCH,
            num_workers=0,
            persistent_workers=False,
            pin_memory=False)
    cfg.train_cfg.max_epochs = 1
    cfg.default_hooks.checkpoint = None
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=1)
    if cfg.model.backbone.type == 'MoCoV3ViT':
        cfg.model.backbone.img_size = SIZE
    return cfg


class Recorder(Hook):
    """Records what each iteration did, after every other hook."""

    priority = 'LOWEST'

    def __init__(self):
        self.lrs, self.losses, self.momenta, self.bn_training = [], [], [], []

    def before_train(self, runner):
        self.state = {
            k: v.detach().clone()
            for k, v in runner.model.state_dict().items()
        }

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        self.lrs.append(runner.optim_wrapper.get_lr()['lr'])

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None):
        self.losses.append(outputs['loss'].item())
        hub = runner.message_hub
        if 'train/momentum' in hub.log_scalars:
            self.momenta.append(hub.get_scalar('train/momentum').current())
        backbone = runner.model.backbone
        self.bn_training.append([
            m.training for m in backbone.modules()
            if isinstance(m, _BatchNorm)
        ])


def train(cfg):
    runner = Runner.from_cfg(cfg)
    recorder = Recorder()
    runner.register_hook(recorder)
    runner.train()
    return runner, recorder


@pytest.mark.parametrize(
    'name,base_lr', [(R50, 9.6), (VIT_S, 2.4e-3), (VIT_B, 2.4e-3)], ids=IDS)
def test_pretraining_config_trains_on_cpu(name, base_lr, tmp_path):
    runner, rec = train(tiny(load(name), tmp_path, pretraining=True))
    model = runner.model
    assert not any(
        isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())
    assert len(rec.losses) == ITERS
    assert all(math.isfinite(x) and x > 0 for x in rec.losses)
    # the warmup starts at base lr x 1e-4 (LinearLR), every group alike
    assert all(lr == pytest.approx(base_lr * 1e-4) for lr in rec.lrs[0])
    # the momentum hook ran after each step with the cosine m_t, t / T:
    # 1/2 -> 1 - 0.01 (cos(pi / 2) + 1) / 2 = 0.995, 2/2 -> 1
    assert rec.momenta == pytest.approx([0.995, 1.0])
    assert next(
        h for h in runner.hooks
        if type(h).__name__ == 'MomentumUpdateHook').num_updates == ITERS
    # the query encoder learned; the predictor is trained too
    state = model.state_dict()
    for key in ('backbone.layer4.1.conv2.weight', 'backbone.layers.11.ln1.'
                'weight', 'neck.mlp.0.weight', 'predictor.mlp.0.weight'):
        if key in state:
            assert not torch.equal(state[key], rec.state[key]), key


_CHECKPOINTS = {}


@pytest.fixture
def checkpoint(request, tmp_path_factory):
    """A MoCo v3 checkpoint of the pretraining config ``request.param``
    (its backbone as shipped, 32 px; small MLPs to save time), whose query
    and momentum encoders differ from each other and from any init. Made
    once per config, as in ``(path, model)``."""
    name = request.param
    if name not in _CHECKPOINTS:
        init_default_scope('mocoplug')
        cfg = load(name)
        if cfg.model.backbone.type == 'MoCoV3ViT':
            cfg.model.backbone.img_size = SIZE
        cfg.model.neck.hid_channels = cfg.model.predictor.hid_channels = 64
        model = MODELS.build(cfg.model)
        model.init_weights()
        with torch.no_grad():
            for value in model.backbone.state_dict().values():
                if value.is_floating_point():
                    value.mul_(1.5).add_(0.01)
            for value in model.momentum_encoder.state_dict().values():
                if value.is_floating_point():
                    value.mul_(0.5).sub_(0.01)
        path = tmp_path_factory.mktemp('mocov3') / 'mocov3.pth'
        torch.save(dict(state_dict=model.state_dict(), meta=dict()), path)
        _CHECKPOINTS[name] = (str(path), model)
    return _CHECKPOINTS[name]


@pytest.mark.parametrize(
    'name,checkpoint', [(n, n) for n in (R50, VIT_S, VIT_B)],
    indirect=['checkpoint'],
    ids=IDS)
def test_linear_config_trains_a_classifier_on_the_frozen_backbone(
        name, checkpoint, tmp_path):
    path, moco = checkpoint
    cfg = tiny(load(LINEAR[name]), tmp_path, pretraining=False)
    cfg.pretrained = path
    assert fill_pretrained(cfg) == 1
    runner, rec = train(cfg)
    model = runner.model
    assert len(rec.losses) == ITERS
    assert all(math.isfinite(x) for x in rec.losses)
    # only the classifier is trained
    assert not any(p.requires_grad for p in model.backbone.parameters())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith('head.') for n in trainable)
    # BN layers stay in eval mode while training (R50; the ViT has none)
    assert all(not training for it in rec.bn_training for training in it)
    if name == R50:
        assert rec.bn_training[0]
    # nothing of the backbone changed, BN statistics included ...
    for key, value in model.backbone.state_dict().items():
        assert torch.equal(value, rec.state['backbone.' + key]), key
    # ... while the classifier learned
    head = [k for k in rec.state if k.startswith('head.')]
    assert any(not torch.equal(model.state_dict()[k], rec.state[k])
               for k in head)
    # it learned on top of the pretrained backbone (R50; see the next test)
    if name == R50:
        for key, value in moco.backbone.state_dict().items():
            assert torch.equal(model.backbone.state_dict()[key], value), key
    # and the linear eval ran its validation with top-1 / top-5
    assert 'val/accuracy/top1' in runner.message_hub.log_scalars


@pytest.mark.parametrize(
    'name,checkpoint', [
        (R50, R50),
        (VIT_S, VIT_S),
        (VIT_B, VIT_B),
    ],
    indirect=['checkpoint'],
    ids=IDS)
def test_pretrained_loads_the_query_encoder(name, checkpoint):
    path, moco = checkpoint
    init_default_scope('mocoplug')
    cfg = load(LINEAR[name])
    if cfg.model.backbone.type == 'MoCoV3ViT':
        cfg.model.backbone.img_size = SIZE
    cfg.pretrained = path
    fill_pretrained(cfg)
    model = MODELS.build(cfg.model)
    model.init_weights()
    query = moco.backbone.state_dict()
    key = moco.momentum_encoder.backbone.state_dict()
    for name_, value in model.backbone.state_dict().items():
        assert torch.equal(value, query[name_]), name_
    assert not any(
        torch.equal(query[k], key[k])
        for k in query if query[k].is_floating_point())
