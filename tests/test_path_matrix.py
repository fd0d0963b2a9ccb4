# Copyright (c) mocoplug contributors. All rights reserved.
"""The path matrix: every shipped pretraining config (found under configs/,
not listed by hand) crossed with what a user switches on, in an all-pairs
design: every pair of levels of two factors is in at least one case.

Factors: the config; start (``scratch``, or ``encoders_from`` a checkpoint
written from the tiny model, in the layout ``LAYOUTS`` gives the config);
resume (``once``: 4 epochs; ``resumed``: also 2 + ``--resume`` + 2,
bit-identical to the 4); ranks (``1``: one process, Shuffle BN ``split``;
``2-ddp`` / ``2-split``: 2 gloo ranks with that Shuffle BN; MoCo v3: ``1``
/ ``2``); data loader workers (0, or 2 persistent); precision (``fp32``;
``bf16`` where the config uses AMP: BF16OptimWrapper on CPU, AmpOptimWrapper
in bfloat16 on CUDA); compile (``eager``, or ``compiled``: mmengine's
``compile``, dynamo's ``aot_eager`` backend (no C++ build in the suite),
for the first config of each algorithm and backbone (the others compile the
same encoders), run in spawned processes: tests/gloo.py); the device (the
``device`` fixture: ``make gpu-check`` runs them on CUDA). Each config runs
at a tiny size (32 px real images, 4 a rank a batch, 1 iteration an epoch,
small networks of the config's kind) and every case asserts what its
factors promise: it trains (finite losses, one momentum update a step); a
released start puts the checkpoint's backbone in both encoders and fills
the queue; a resumed run ends with the same tensors and losses; 2 ranks end
with equal query encoders and queues; a compiled run compiles in its first
steps only. A hook draws from every generator after each epoch's snapshot,
as a logging hook might. Rank agreement of stop decisions:
tests/engine/hooks/test_rank_agreement.py. The case count is printed in
the suite's summary (``path matrix: N cases``).
"""
import glob
import itertools
import math
import os
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook

from mocoplug.registry import HOOKS, MODELS, RUNNERS
from .conftest import unique_experiment_name
# registers DrawRandomNumbersHook: draws after each checkpoint's snapshot
from .engine.hooks import test_exact_resume_hook  # noqa: F401
from .gloo import free_port, run_two_ranks

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIGS = sorted(
    osp.relpath(p, osp.join(ROOT, 'configs'))
    for p in glob.glob(osp.join(ROOT, 'configs', '*.py')) +
    glob.glob(osp.join(ROOT, 'configs', 'mocov*', '*.py')))
SIZE, BATCH, DIM, EPOCHS = 32, 4, 16, 4
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
        precision=('fp32', 'bf16') if '-amp-' in name else ('fp32', ),
        compile=('eager', 'compiled') if name in COMPILED else ('eager', ))


def all_pairs(configs):
    """A small list of cases (dicts) covering every pair of levels of two
    factors that some config allows (greedy, deterministic)."""
    allowed = {c: levels(c) for c in configs}
    factors = list(allowed[configs[0]])

    def pairs(case):
        return {((f, case[f]), (g, case[g]))
                for f, g in itertools.combinations(factors, 2)}

    todo = set()
    for options in allowed.values():
        for f, g in itertools.combinations(factors, 2):
            todo |= {((f, a), (g, b)) for a in options[f] for b in options[g]}
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


CASES = all_pairs(CONFIGS)


def case_id(case: dict) -> str:
    name = osp.splitext(osp.basename(case['config']))[0]
    return (f"{name}-{case['start']}-{case['resume']}-ranks{case['ranks']}-"
            f"workers{case['workers']}-{case['precision']}-{case['compile']}")


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
            data_root=image_folder,
            with_label=False,
            pipeline=shrink(dataset.pipeline))
    loader.dataset.indices = BATCH * ranks  # one iteration an epoch
    loader.update(
        batch_size=BATCH,
        num_workers=case['workers'],
        persistent_workers=case['workers'] > 0,
        pin_memory=False)
    cfg.train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=EPOCHS)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=2)
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=1)
    cfg.custom_hooks = [
        h for h in cfg.get('custom_hooks', []) if h['type'] != 'KNNMonitorHook'
    ] + [dict(type='PathRecorder'),
         dict(type='DrawRandomNumbersHook')]
    wrapper = cfg.optim_wrapper
    wrapper.pop('loss_scale', None)
    if case['precision'] == 'bf16' and device == 'cuda':
        wrapper.update(type='AmpOptimWrapper', dtype='bfloat16')
    elif case['precision'] == 'bf16':
        wrapper.type = 'BF16OptimWrapper'
    else:
        wrapper.type = 'OptimWrapper'
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
            graphs=[])

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
            h.num_updates for h in runner.hooks
            if type(h).__name__ == 'MomentumUpdateHook')
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
        os.environ.update(
            MASTER_ADDR='127.0.0.1',
            MASTER_PORT=str(port),
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(ranks))
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


@pytest.mark.parametrize('case', CASES, ids=[case_id(c) for c in CASES])
def test_path(case, device, tmp_path, image_folder, deterministic):
    ranks = int(case['ranks'][0])
    if device == 'cuda' and ranks > 1:
        pytest.skip('2 ranks on CUDA: tools/gpu_check.py --steps multi_gpu')
    cfg = tiny_cfg(case, tmp_path / 'full', image_folder, device)
    released = None
    if case['start'] == 'released':
        layout = LAYOUTS[CONFIGS.index(case['config']) % len(LAYOUTS)]
        if cfg.model.backbone.type == 'MoCoV3ViT' and layout == 'official':
            layout = 'backbone only'  # timm names: test_encoder_checkpoint
        released = release(cfg, layout, str(tmp_path / 'released.pth'))
        cfg.model.encoders_from = str(tmp_path / 'released.pth')
    full = launch(cfg, ranks)
    for seen in full:  # it trains
        assert len(seen['losses']) == EPOCHS
        assert all(math.isfinite(x) and x > 0 for x in seen['losses'])
        assert seen['updates'] == EPOCHS
        # compiled in the first steps, never after the second though the lr
        # and momentum change (BF16OptimWrapper's first-step check of the
        # CPU convolutions: hooks, a recompile in the second)
        assert seen['compiled'] == (case['compile'] == 'compiled')
        assert seen['graphs'][1:] == seen['graphs'][1:2] * (EPOCHS - 1)
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
    if ranks > 1:  # DDP kept the query encoders equal; one global queue
        for k, v in full[0]['end'].items():
            if k.startswith(('backbone.', 'neck.', 'queue.keys')) and \
                    not is_bn_statistic(k):
                assert torch.equal(v, full[1]['end'][k]), k
    if case['resume'] == 'resumed':
        cfg = tiny_cfg(case, tmp_path / 'resumed', image_folder, device)
        cfg.model.encoders_from = released and str(tmp_path / 'released.pth')
        cfg.update(
            resume=True, load_from=str(tmp_path / 'full' / 'epoch_2.pth'))
        resumed = launch(cfg, ranks)
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
            'pretraining configs, every pair of factor levels covered')
