# Copyright (c) mocoplug contributors. All rights reserved.
"""The path matrix: every shipped pretraining config (found under configs/,
not listed by hand) crossed with what a user switches on, in an all-pairs
design: every pair of levels of two factors is in at least one case.

Factors: the config; start (``scratch``, or ``encoders_from`` a checkpoint
written from the tiny model, in the layout ``LAYOUTS`` gives the config);
resume (``once``: 4 iterations; ``resumed``: also 2 + ``--resume`` + 2,
bit-identical to the 4); ranks (``1``: one process, Shuffle BN ``split``;
``2-ddp`` / ``2-split``: 2 gloo ranks with that Shuffle BN; MoCo v3: ``1``
/ ``2``); data loader workers (0, or 2 persistent); precision (``fp32``;
``bf16`` where the config uses AMP: BF16OptimWrapper on CPU, AmpOptimWrapper
in bfloat16 on CUDA); compile (``eager``, or ``compiled``: mmengine's
``compile``, dynamo's ``aot_eager`` backend (no C++ build in the suite),
for the first config of each algorithm and backbone (the others compile the
same encoders), run in spawned processes: tests/gloo.py); the device (the
``device`` fixture: ``make gpu-check`` runs them on CUDA); and the crossings
users met past those: data (``one`` global batch; ``remainder``: two and
one image more, dropped by ``drop_last``; below one batch is refused before
training: ``test_a_folder_below_one_global_batch_is_refused``); loop
(``epoch``, or ``iter``: IterBasedTrainLoop over an InfiniteSampler);
accumulation (``optim_wrapper.accumulative_counts`` 1 or 2); checkpoint
(``full``, or ``partial``: without optimizer and scheduler state, whose
resume is warned about instead of claimed bit-identical); wrapper
(``default``, or ``user``: the user's ``model_wrapper_cfg``, read on 2
ranks); momentum (``schedule``, or ``frozen``: m = 1); and precision
``fp16`` (AmpOptimWrapper with its GradScaler, CUDA only); bands, by the
config (8-bit RGB images, or, for a config whose loader keeps the files'
bands and bits, the same digits as 4-band 16-bit TIFFs: ``band_folder``),
so its levels meet every other factor's through the config's pairs. Each
config runs
at a tiny size (32 px real images, 4 a rank a batch, 1 or 2 iterations an
epoch, small networks of the config's kind) and every case asserts what its
factors promise: it trains (finite losses, one momentum update per
optimizer step); a released start puts the checkpoint's backbone in both
encoders and fills the queue; a resumed run ends with the same tensors and
losses (a partial checkpoint: the named warning); 2 ranks end with equal
query encoders and queues; a compiled run compiles in its first steps
only; a frozen key encoder ends where it started. A hook draws from every
generator after each epoch's snapshot, as a logging hook might. The linear
benchmark configs have their own all-pairs matrix (``LINEAR_CASES``: ranks,
workers, resume, checkpoint ``full`` / ``partial`` / ``best`` with
``save_best='auto'``). Rank agreement of stop decisions:
tests/engine/hooks/test_rank_agreement.py. The case count is printed in
the suite's summary (``path matrix: N cases``).
"""
import glob
import itertools
import math
import os
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook

from mocoplug.registry import HOOKS, MODELS, RUNNERS
from .conftest import unique_experiment_name
# registers DrawRandomNumbersHook: draws after each checkpoint's snapshot
from .engine.hooks import test_exact_resume_hook  # noqa: F401
from .gloo import free_port, run_two_ranks, torchrun_env

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIGS = sorted(
    osp.relpath(p, osp.join(ROOT, 'configs'))
    for p in glob.glob(osp.join(ROOT, 'configs', '*.py')) +
    glob.glob(osp.join(ROOT, 'configs', 'mocov*', '*.py')))
SIZE, BATCH, DIM, ITERS = 32, 4, 16, 4
# the released layout each kind of backbone is started from (the layouts
# themselves: tests/models/utils/test_encoder_checkpoint.py)
LAYOUTS = ('full model', 'official', 'backbone only')


def is_v3(name: str) -> bool:
    return name.startswith('mocov3')


# compiled: the first config of each algorithm and backbone (the others
# compile the same encoders; the lr and momentum stay out of the graphs)
COMPILED = set(
    {tuple(osp.basename(c).split('_')[:2]): c
     for c in reversed(CONFIGS)}.values())


def levels(name: str) -> dict:
    """The levels of each factor this config can take."""
    return dict(
        config=(name, ),
        start=('scratch', 'released'),
        resume=('once', 'resumed'),
        ranks=('1', '2') if is_v3(name) else ('1', '2-ddp', '2-split'),
        workers=(0, 2),
        precision=('fp32', 'bf16', 'fp16') if '-amp-' in name else ('fp32', ),
        compile=('eager', 'compiled') if name in COMPILED else ('eager', ),
        data=('one', 'remainder'),
        loop=('epoch', 'iter'),
        accumulation=(1, 2),
        checkpoint=('full', 'partial'),
        wrapper=('default', 'user'),
        momentum=('schedule', 'frozen'))


def linear_levels(name: str) -> dict:
    return dict(
        config=(name, ),
        ranks=('1', '2'),
        workers=(0, 2),
        resume=('once', 'resumed'),
        checkpoint=('full', 'partial', 'best'))


def cpu_levels(name: str) -> dict:
    """:func:`levels` without fp16 (CUDA only: its pairs get cases of their
    own, so that every other pair is covered on the CPU)."""
    found = levels(name)
    found['precision'] = tuple(p for p in found['precision'] if p != 'fp16')
    return found


def all_pairs(configs, levels=levels, keep=lambda pair: True):
    """A small list of cases (dicts) covering every pair of levels of two
    factors that some config allows and ``keep`` keeps (greedy,
    deterministic)."""
    allowed = {c: levels(c) for c in configs}
    factors = list(allowed[configs[0]])

    def pairs(case):
        return {((f, case[f]), (g, case[g]))
                for f, g in itertools.combinations(factors, 2)}

    todo = set()
    for options in allowed.values():
        for f, g in itertools.combinations(factors, 2):
            todo |= {((f, a), (g, b))
                     for a in options[f]
                     for b in options[g] if keep(((f, a), (g, b)))}
    cases = []
    while todo:
        (f, a), (g, b) = min(todo, key=repr)  # an uncovered pair, seeded
        best = None
        for config, options in allowed.items():
            if a not in options[f] or b not in options[g]:
                continue
            case = {'config': config, f: a, g: b}
            for h in factors:  # each other factor: the most new pairs
                if h not in case:
                    case[h] = max(
                        options[h],
                        key=lambda x: len(
                            pairs({
                                **{
                                    k: options[k][0]
                                    for k in factors
                                },
                                **case, h: x
                            }) & todo))
            gain = len(pairs(case) & todo)
            if best is None or gain > best[0]:
                best = (gain, case)
        todo -= pairs(best[1])
        cases.append(best[1])
    return cases


def eager_levels(name: str) -> dict:
    """:func:`cpu_levels`, eager only: the compiled pairs get cases of their
    own too, cheap levels wherever a compiled pair does not need another
    (a compiled run spawns its processes and compiles in each)."""
    return dict(cpu_levels(name), compile=('eager', ))


CASES = (
    all_pairs(CONFIGS, eager_levels) + all_pairs(
        CONFIGS, cpu_levels, keep=lambda p: ('compile', 'compiled') in p) +
    all_pairs(CONFIGS, keep=lambda pair: ('precision', 'fp16') in pair))
LINEAR_CONFIGS = sorted(
    osp.relpath(p, osp.join(ROOT, 'configs'))
    for p in glob.glob(osp.join(ROOT, 'configs', 'benchmarks', 'linear_*.py')))

LINEAR_CASES = all_pairs(LINEAR_CONFIGS, linear_levels)


def case_id(case: dict) -> str:
    name = osp.splitext(osp.basename(case['config']))[0]
    names = {**levels(case['config']), **linear_levels(case['config'])}
    return '-'.join([name] + [
        f'{k}{case[k]}' if k in ('ranks', 'workers',
                                 'accumulation') else str(case[k])
        for k in names if k in case and k != 'config'
    ])


def iters_per_epoch(case: dict) -> int:
    return 2 if case['data'] == 'remainder' else 1


def shrink(obj):
    """Every crop and resize of a pipeline (or device augmentation) at
    SIZE px."""
    if isinstance(obj, (list, tuple)):
        return type(obj)(shrink(o) for o in obj)
    if not isinstance(obj, dict):
        return obj
    obj = {k: shrink(v) for k, v in obj.items()}
    kind = str(obj.get('type', '')).split('.')[-1]
    if kind in ('RandomResizedCrop', 'ResizeEdge', 'Resize'):
        obj['scale'] = SIZE
    elif kind == 'CenterCrop':
        obj['crop_size'] = SIZE
    return obj


def tiny_model(model: dict) -> dict:
    """The config's algorithm, neck, head, queue and backbone kind, at a
    size that trains in a second."""
    backbone = model.backbone
    if backbone.type == 'ResNet':
        backbone.update(depth=18, base_channels=8, stem_channels=8)
        features = 64
    elif backbone.type == 'MoCoV3ViT':
        backbone.update(
            img_size=SIZE,
            arch=dict(
                embed_dims=32,
                num_layers=1,
                num_heads=2,
                feedforward_channels=64))
        features = 32
    else:  # SmallConvNet
        backbone.channels = (8, 16, 16, 32)
        features = 32
    model.neck.update(in_channels=features, hid_channels=32, out_channels=DIM)
    if model.get('predictor'):
        model.predictor.update(
            in_channels=DIM, hid_channels=32, out_channels=DIM)
    if model.get('queue'):
        model.queue.update(size=20, dim=DIM)  # 20: wraps around
    return model


def band_folder(image_folder: str) -> str:
    """The bands factor's other level: the same digits as 4-band 16-bit
    TIFFs (the grey levels x 257 in band 4, uniform noise in bands 1-3),
    written once beside ``image_folder``."""
    import tifffile
    from PIL import Image
    root = image_folder.rstrip('/') + '_bands'
    if not osp.isdir(root):
        rng = np.random.default_rng(0)
        for path in sorted(glob.glob(osp.join(image_folder, '*', '*.png'))):
            gray = np.asarray(Image.open(path).convert('L'), np.uint16) * 257
            noise = rng.integers(0, 65536, gray.shape + (3, ), np.uint16)
            out = osp.join(root, osp.relpath(path, image_folder))[:-3] + 'tif'
            os.makedirs(osp.dirname(out), exist_ok=True)
            tifffile.imwrite(out, np.concatenate([noise, gray[..., None]], 2))
    return root


def tiny_cfg(case: dict, work_dir, image_folder: str, device: str) -> Config:
    """The case's config: the shipped one with small data and networks."""
    cfg = Config.fromfile(osp.join(ROOT, 'configs', case['config']))
    ranks = int(case['ranks'][0])
    cfg.work_dir = str(work_dir)
    cfg.experiment_name = unique_experiment_name(work_dir)
    cfg.log_level = 'WARNING'
    cfg.randomness = dict(seed=0, deterministic=True)
    cfg.env_cfg = dict(dist_cfg=dict(backend='gloo'))
    cfg.model = tiny_model(cfg.model)
    if cfg.model.type == 'MoCo':
        cfg.model.shuffle_bn = 'ddp' if case['ranks'] == '2-ddp' else 'split'
        cfg.model.num_splits = 2
    if cfg.model.get('data_preprocessor'):
        cfg.model.data_preprocessor = shrink(cfg.model.data_preprocessor)
    loader = cfg.train_dataloader
    dataset = loader.dataset
    if dataset.type in ('DigitsDataset', 'PhotoTilesDataset'):
        dataset.pipeline = shrink(dataset.pipeline)
    else:  # image files: a folder of real photographs' size
        loader.dataset = dict(
            type='CustomDataset',
            data_root=band_folder(image_folder)
            if 'tifffile' in str(dataset.pipeline) else image_folder,
            with_label=False,
            pipeline=shrink(dataset.pipeline))
    # one global batch an epoch, or two and one image more (dropped); 4
    # iterations in all, a checkpoint after 2
    per_epoch = iters_per_epoch(case)
    loader.dataset.indices = BATCH * ranks * per_epoch + (per_epoch > 1)
    loader.update(
        batch_size=BATCH,
        drop_last=True,
        num_workers=case['workers'],
        persistent_workers=case['workers'] > 0,
        pin_memory=False)
    checkpoint = dict(type='CheckpointHook', interval=2 // per_epoch)
    if case['loop'] == 'iter':
        loader.sampler = dict(type='InfiniteSampler', shuffle=True)
        cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=ITERS)
        cfg.param_scheduler = [
            dict(type='CosineAnnealingLR', T_max=ITERS, by_epoch=False)
        ]
        checkpoint.update(by_epoch=False, interval=2)
    else:
        cfg.train_cfg = dict(
            type='EpochBasedTrainLoop', max_epochs=ITERS // per_epoch)
    if case['checkpoint'] == 'partial':
        checkpoint.update(save_optimizer=False, save_param_scheduler=False)
    cfg.default_hooks.checkpoint = checkpoint
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=1)
    cfg.custom_hooks = [
        h for h in cfg.get('custom_hooks', []) if h['type'] != 'KNNMonitorHook'
    ] + [dict(type='PathRecorder'),
         dict(type='DrawRandomNumbersHook')]
    if case['momentum'] == 'frozen':  # the key encoder stays where it starts
        momentum, = (
            h for h in cfg.custom_hooks if h['type'] == 'MomentumUpdateHook')
        momentum.update(momentum=1.0, end_momentum=1.0)
    if case['wrapper'] == 'user':  # read on 2 ranks (mmengine: 1 unwrapped)
        cfg.model_wrapper_cfg = dict(type='MMDistributedDataParallel')
    wrapper = cfg.optim_wrapper
    wrapper.pop('loss_scale', None)
    if case['precision'] == 'bf16' and device == 'cuda':
        wrapper.update(type='AmpOptimWrapper', dtype='bfloat16')
    elif case['precision'] == 'bf16':
        wrapper.type = 'BF16OptimWrapper'
    elif case['precision'] == 'fp16':
        wrapper.update(
            type='AmpOptimWrapper', dtype='float16', loss_scale='dynamic')
    else:
        wrapper.type = 'OptimWrapper'
    wrapper.accumulative_counts = case['accumulation']
    if ranks > 1:
        cfg.launcher = 'pytorch'
    if case['compile'] == 'compiled':  # dynamo + AOTAutograd, no C++ build
        cfg.compile = dict(backend='aot_eager')
    return cfg


@HOOKS.register_module(force=True)
class PathRecorder(Hook):
    """What a case asserts on, written to ``<work_dir>/rank<r>.pt``."""

    priority = 'VERY_HIGH'  # before_train: before the queue refill

    def before_train(self, runner):
        model = runner.model.module if hasattr(runner.model,
                                               'module') else runner.model
        self.seen = dict(
            start={
                k: v.detach().cpu().clone()
                for k, v in model.state_dict().items()
            },
            losses=[],
            graphs=[],
            val=[])

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        model = runner.model.module if hasattr(runner.model,
                                               'module') else runner.model
        if runner.iter == 0 and getattr(model, 'queue', None) is not None:
            self.seen['first_queue'] = model.queue().detach().cpu().clone()

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None):
        self.seen['losses'].append(float(outputs['loss']))
        self.seen['graphs'].append(
            torch._dynamo.utils.counters['stats']['unique_graphs'])

    def after_val_epoch(self, runner, metrics=None):
        self.seen['val'].append(dict(metrics or {}))

    def after_train(self, runner):
        model = runner.model.module if hasattr(runner.model,
                                               'module') else runner.model
        if getattr(model, 'queue', None) is not None:
            model.queue()  # the last step's keys written
        self.seen['end'] = {
            k: v.detach().cpu().clone()
            for k, v in model.state_dict().items()
        }
        self.seen['compiled'] = model.backbone._compiled_call_impl is not None
        self.seen['updates'] = next(
            (h.num_updates for h in runner.hooks
             if type(h).__name__ == 'MomentumUpdateHook'), None)
        rank = int(os.environ.get('RANK', 0))
        torch.save(self.seen, osp.join(runner.work_dir, f'rank{rank}.pt'))


def train(cfg: Config) -> None:
    runner = RUNNERS.build(cfg)
    runner.train()
    iterator = getattr(runner.train_dataloader, '_iterator', None)
    if iterator is not None:  # persistent workers: not left to a later GC
        iterator._shutdown_workers()


def _rank_main(rank: int, port: int, cfg_dict: dict, ranks: int) -> None:
    if ranks > 1:
        torchrun_env(rank, port, ranks)
    train(Config(cfg_dict))
    if ranks > 1:
        torch.distributed.destroy_process_group()


def launch(cfg: Config, ranks: int) -> list:
    """Train ``cfg`` in ``ranks`` processes (forked; spawned when compiled:
    tests/gloo.py); what each rank recorded."""
    if ranks == 1 and not cfg.get('compile'):
        train(cfg)
    else:
        run_two_ranks(
            _rank_main,
            free_port(),
            cfg.to_dict(),
            ranks,
            start_method='spawn' if cfg.get('compile') else 'fork',
            nprocs=ranks)
    return [
        torch.load(osp.join(cfg.work_dir, f'rank{r}.pt'), weights_only=False)
        for r in range(ranks)
    ]


def is_bn_statistic(key: str) -> bool:
    return key.endswith(('running_mean', 'running_var', 'num_batches_tracked'))


def release(cfg: Config, layout: str, path: str) -> dict:
    """A checkpoint of the tiny model in ``layout`` whose backbone
    differs from any init; returns the backbone's tensors."""
    model = MODELS.build(cfg.model)
    model.init_weights()
    backbone = {
        k: (v * 1.5 + 0.01 if v.is_floating_point() else v)
        for k, v in model.backbone.state_dict().items()
    }
    if layout == 'full model':
        state = {
            **{
                f'backbone.{k}': v
                for k, v in backbone.items()
            },
            **{
                f'neck.{k}': v
                for k, v in model.neck.state_dict().items()
            }
        }
    elif layout == 'official':
        prefix = ('module.base_encoder.'
                  if cfg.model.type == 'MoCoV3' else 'module.encoder_q.')
        state = {prefix + k: v for k, v in backbone.items()}
    else:
        state = dict(backbone)
    torch.save(dict(state_dict=state), path)
    return backbone


def resume_warnings(work_dir) -> list:
    """ExactResumeHook's warnings in the run's log files (rank 0's)."""
    found = []
    for path in glob.glob(osp.join(str(work_dir), '*', '*.log')):
        with open(path) as f:
            found += [line for line in f if 'ExactResumeHook: ' in line]
    return found


@pytest.mark.parametrize('case', CASES, ids=[case_id(c) for c in CASES])
def test_path(case, device, tmp_path, image_folder, deterministic):
    ranks = int(case['ranks'][0])
    if device == 'cuda' and ranks > 1:
        pytest.skip('2 ranks on CUDA: tools/gpu_check.py --steps multi_gpu')
    if device == 'cpu' and case['precision'] == 'fp16':
        pytest.skip('fp16 with its GradScaler: CUDA (make gpu-check)')
    per_epoch = iters_per_epoch(case)
    iters, steps = ITERS, ITERS // case['accumulation']
    cfg = tiny_cfg(case, tmp_path / 'full', image_folder, device)
    released = None
    if case['start'] == 'released':
        layout = LAYOUTS[CONFIGS.index(case['config']) % len(LAYOUTS)]
        if cfg.model.backbone.type == 'MoCoV3ViT' and layout == 'official':
            layout = 'backbone only'  # timm names: test_encoder_checkpoint
        released = release(cfg, layout, str(tmp_path / 'released.pth'))
        cfg.model.encoders_from = str(tmp_path / 'released.pth')
    full = launch(cfg, ranks)
    for seen in full:  # it trains, one momentum update an optimizer step
        assert len(seen['losses']) == iters
        assert all(math.isfinite(x) and x > 0 for x in seen['losses'])
        assert seen['updates'] == steps
        # compiled in the first steps, never after the second though the lr
        # and momentum change (BF16OptimWrapper's first-step check of the
        # CPU convolutions: hooks, a recompile in the second)
        assert seen['compiled'] == (case['compile'] == 'compiled')
        assert seen['graphs'][1:] == seen['graphs'][1:2] * (iters - 1)
        # one graph per compiled encoder: no graph breaks
        # (MoCoV3ViT's numpy drop-path rates broke 2 per block)
        assert seen['graphs'][0] == seen['compiled'] * (4 if is_v3(
            case['config']) else 3)
    if released is not None:  # both encoders start from the checkpoint
        start = full[0]['start']
        for k, v in released.items():
            if v.is_floating_point():
                assert torch.equal(start[f'backbone.{k}'], v), k
                assert torch.equal(start[f'momentum_encoder.backbone.{k}'],
                                   v), k
        if 'first_queue' in full[0]:  # filled with keys of this data
            first, initial = full[0]['first_queue'], start['queue.keys']
            assert not (first[:, None] == initial[None]).all(-1).any()
    if case['momentum'] == 'frozen':  # m = 1: the key encoder never moved
        for k, v in full[0]['start'].items():
            if k.startswith('momentum_encoder.') and v.is_floating_point() \
                    and not is_bn_statistic(k):
                assert torch.equal(full[0]['end'][k], v), k
    if ranks > 1:  # DDP kept the query encoders equal; one global queue
        for k, v in full[0]['end'].items():
            if k.startswith(('backbone.', 'neck.', 'queue.keys')) and \
                    not is_bn_statistic(k):
                assert torch.equal(v, full[1]['end'][k]), k
    if case['resume'] == 'resumed':
        cfg = tiny_cfg(case, tmp_path / 'resumed', image_folder, device)
        cfg.model.encoders_from = released and str(tmp_path / 'released.pth')
        middle = (f'epoch_{2 // per_epoch}.pth'
                  if case['loop'] == 'epoch' else 'iter_2.pth')
        cfg.update(resume=True, load_from=str(tmp_path / 'full' / middle))
        resumed = launch(cfg, ranks)
        warned = resume_warnings(tmp_path / 'resumed')
        if case['checkpoint'] == 'partial':  # named, not claimed identical
            assert len(warned) == 1 and 'no optimizer state' in warned[0] \
                and 'no scheduler state' in warned[0], warned
            return
        assert warned == []
        for rank, (a, b) in enumerate(zip(full, resumed)):
            assert a['losses'][2:] == b['losses']
            for k, v in a['end'].items():
                # the checkpoint holds rank 0's BN statistics: the other
                # ranks (each with its own) restart from those
                if rank == 0 or not is_bn_statistic(k):
                    assert torch.equal(v, b['end'][k]), (rank, k)


def summary_line() -> str:
    """The line tests/conftest.py prints in the summary."""
    return (f'path matrix: {len(CASES)} cases over {len(CONFIGS)} shipped '
            f'pretraining configs and {len(LINEAR_CASES)} over '
            f'{len(LINEAR_CONFIGS)} linear benchmark configs, every pair of '
            'factor levels covered')


@pytest.fixture(scope='module')
def labelled_root(image_folder, tmp_path_factory):
    """train/ and val/, each the two class folders of ``image_folder``."""
    root = tmp_path_factory.mktemp('labelled')
    for split in ('train', 'val'):
        os.symlink(image_folder, root / split)
    return str(root)


def linear_cfg(case: dict, work_dir, root: str, pretrained: str) -> Config:
    """The linear config at a tiny size: its backbone kind frozen, 2 classes
    of real images, 2 epochs of 2 (2 ranks) or 4 iterations, validation
    after each; the case's checkpoint kind."""
    cfg = Config.fromfile(osp.join(ROOT, 'configs', case['config']))
    cfg.work_dir = str(work_dir)
    cfg.experiment_name = unique_experiment_name(work_dir)
    cfg.log_level = 'WARNING'
    cfg.randomness = dict(seed=0, deterministic=True)
    cfg.env_cfg = dict(dist_cfg=dict(backend='gloo'))
    backbone = cfg.model.backbone
    if backbone.type == 'MoCoV3ViT':
        backbone.update(
            img_size=SIZE,
            frozen_stages=1,
            arch=dict(
                embed_dims=32,
                num_layers=1,
                num_heads=2,
                feedforward_channels=64))
        cfg.model.head.in_channels = 32
    else:
        backbone.update(depth=18, base_channels=8, stem_channels=8)
        cfg.model.head.in_channels = 64
    cfg.model.head.num_classes = 2
    cfg.pretrained = pretrained
    for split, field in (('train', 'train_dataloader'), ('val',
                                                         'val_dataloader')):
        loader = cfg[field]
        loader.dataset = dict(
            type='CustomDataset',
            data_root=root,
            data_prefix=split,
            with_label=True,
            pipeline=shrink(loader.dataset.pipeline))
        loader.update(
            batch_size=BATCH,
            num_workers=case['workers'],
            persistent_workers=case['workers'] > 0,
            pin_memory=False)
    cfg.test_dataloader = cfg.test_evaluator = cfg.test_cfg = None
    cfg.val_evaluator = dict(type='Accuracy', topk=(1, ))
    cfg.train_cfg = dict(
        type='EpochBasedTrainLoop', max_epochs=2, val_interval=1)
    checkpoint = dict(type='CheckpointHook', interval=1)
    if case['checkpoint'] == 'partial':
        checkpoint.update(save_optimizer=False, save_param_scheduler=False)
    elif case['checkpoint'] == 'best':  # rank 0 saves it alone
        checkpoint.update(save_best='auto')
    cfg.default_hooks.checkpoint = checkpoint
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=1)
    cfg.custom_hooks = [dict(type='PathRecorder')]
    if case['ranks'] == '2':
        cfg.launcher = 'pytorch'
    return cfg


@pytest.mark.parametrize(
    'case', LINEAR_CASES, ids=[case_id(c) for c in LINEAR_CASES])
def test_linear_path(case, device, tmp_path, labelled_root, deterministic):
    ranks = int(case['ranks'])
    if device == 'cuda' and ranks > 1:
        pytest.skip('2 ranks on CUDA: tools/gpu_check.py --steps multi_gpu')
    pretrained = str(tmp_path / 'moco.pth')
    cfg = linear_cfg(case, tmp_path / 'full', labelled_root, pretrained)
    released = MODELS.build(cfg.model.backbone).state_dict()
    torch.save(
        dict(state_dict={
            f'backbone.{k}': v
            for k, v in released.items()
        }), pretrained)
    full = launch(cfg, ranks)
    iters = 2 * 16 // (BATCH * ranks)
    for seen in full:  # trains and validates on a backbone that loaded
        assert len(seen['losses']) == iters
        assert all(math.isfinite(x) for x in seen['losses'])
        assert [set(m) for m in seen['val']] == [{'accuracy/top1'}] * 2
        for k, v in released.items():
            assert torch.equal(seen['start'][f'backbone.{k}'], v), k
    best = glob.glob(str(tmp_path / 'full' / 'best_*.pth'))
    assert len(best) == (case['checkpoint'] == 'best')
    if ranks > 1:  # one classifier on every rank
        for k, v in full[0]['end'].items():
            assert torch.equal(v, full[1]['end'][k]), k
    if case['resume'] == 'once':
        return
    cfg = linear_cfg(case, tmp_path / 'resumed', labelled_root, pretrained)
    middle = best[0] if best else str(tmp_path / 'full' / 'epoch_1.pth')
    cfg.update(resume=True, load_from=middle)
    resumed = launch(cfg, ranks)
    warned = resume_warnings(tmp_path / 'resumed')
    if case['checkpoint'] != 'full':  # best_*.pth: no optimizer state either
        assert len(warned) == 1 and 'no optimizer state' in warned[0], warned
        return
    assert warned == []
    for a, b in zip(full, resumed):
        assert a['losses'][iters // 2:] == b['losses']
        for k, v in a['end'].items():
            assert torch.equal(v, b['end'][k]), k


@pytest.mark.parametrize('config,ranks', [(c, '1') for c in sorted(COMPILED)] +
                         [(sorted(COMPILED)[0], '2')])
def test_a_folder_below_one_global_batch_is_refused(config, ranks, tmp_path,
                                                    image_folder):
    """The data factor's third level: fewer images a rank than its batch
    (README's small-folder path: continued from released weights) ends
    before training with the numbers, on every rank alike; for the first
    config of each algorithm and backbone (the decision reads the loader,
    which the others share)."""
    case = {f: v[0] for f, v in levels(config).items()}
    case.update(config=config, start='released', ranks=ranks)
    cfg = tiny_cfg(case, tmp_path, image_folder, 'cpu')
    cfg.train_dataloader.dataset.indices = (BATCH - 1) * int(ranks)
    release(cfg, 'backbone only', str(tmp_path / 'released.pth'))
    cfg.model.encoders_from = str(tmp_path / 'released.pth')
    with pytest.raises(
            Exception,
            match='train_dataloader yields no batch: '
            f'{(BATCH - 1) * int(ranks)} images over {ranks} '
            rf'process\(es\), {BATCH - 1} a process'):
        launch(cfg, int(ranks))
    assert not glob.glob(str(tmp_path / '*.pth'))[1:]
