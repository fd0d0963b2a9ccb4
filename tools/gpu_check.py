# Copyright (c) mocoplug contributors. All rights reserved.
"""mocoplug's first contact with a GPU: one command, one JSON report, a
table.

    python tools/gpu_check.py            # CUDA when visible, else CPU toy mode
    make gpu-check                       # the same

Steps (``--steps``; what each covers: docs/user_guides/performance.md):
``device_tests`` (pytest ``-m device --device cuda`` on ``DEVICE_TESTS``),
``train`` (the MoCo v2 R50 config on synthetic images: float32, AMP,
bfloat16, channels_last, cuDNN autotuning, an lr-0 control; the loss must
end below the control's), ``exact_resume`` (bitwise equal after a resume,
deterministic kernels), ``benchmark`` (``benchmark.py train`` and
``device-augment --decode``, the GPU decode repeated), ``knn`` (ImageNet
size), ``multi_gpu`` (torchrun, one process per GPU; two gloo processes on
a CPU) and ``detection`` (``benchmark.py detection-ops``).

Without CUDA (or with ``--device cpu``) the same code paths run at toy
sizes (ResNet-18, 32 px crops, a few iterations; the report's ``mode`` says
so); CI runs that mode (tests/tools/test_gpu_check.py). The report is
rewritten after every step, so a run stopped at a time limit keeps the
steps it finished. Without the OpenMMLab packages and network: install
them from local wheels first (docs/get_started.md#a-gpu-machine).
"""
import argparse
import gc
import json
import math
import os
import os.path as osp
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from typing import Callable, Dict, Optional

# cuBLAS is deterministic under torch.use_deterministic_algorithms (the
# exact-resume step) only with this workspace setting, read as CUDA starts.
os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')

import torch  # noqa: E402
from mmengine.config import Config  # noqa: E402
from mmengine.dist import barrier  # noqa: E402

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG = osp.join(ROOT, 'configs',
                  'mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py')
# test files with tests that take the `device` fixture (tests/conftest.py)
DEVICE_TESTS = [
    'tests/models/queues/test_negative_key_queue.py',
    'tests/models/utils/test_fused_info_nce.py',
    'tests/engine/hooks/test_momentum_update_hook.py',
    'tests/models/utils/test_split_batch_norm.py',
    'tests/models/algorithms/test_moco.py',
    'tests/engine/hooks/test_exact_resume_hook.py',
    'tests/models/algorithms/test_mixed_precision.py',
]
STEPS = ('device_tests', 'train', 'exact_resume', 'benchmark', 'knn',
         'multi_gpu', 'detection')
V2_DEVICE_AUG = CONFIG.replace('.py', '_device-aug.py')
V3_CONFIG = osp.join(ROOT, 'configs',
                     'mocov3/mocov3_r50_8xb512-amp-coslr-100e_in1k.py')
FEATURES = {18: 512, 50: 2048}

# What each mode runs. cuda: the shipped config at its size; cpu: the same
# code paths at toy sizes, to check the script in CI.
SIZES = dict(
    cuda=dict(
        depth=50,
        crop=224,
        image=256,
        batch=32,
        num_splits=8,
        workers=8,
        iters=200,
        resume_iters=40,
        bench=[
            '--backbone', 'resnet50', '--img-size', '224', '--batch', '32',
            '--queue-size', '65536', '--steps', '20', '--warmup', '5'
        ],
        bench_combos=[(a, c) for a in ('off', 'on') for c in ('off', 'on')],
        augment_batches=['32', '256'],
        knn=[],  # benchmark_knn's defaults: ImageNet size
        dist_iters=50,
        detection=['--size', '512', '--batch', '2', '--rois', '512']),
    cpu=dict(
        depth=18,
        width=16,  # stem and base channels (64 in ResNet-18 proper)
        # 32 px: ResNet's last stage then sees 2x2 maps (on 1x1 maps with
        # stride 2, oneDNN 3.x's bfloat16 weight gradient reads
        # uninitialised memory; see BF16OptimWrapper)
        crop=32,
        image=40,
        batch=8,
        num_splits=2,
        workers=0,
        iters=4,
        resume_iters=4,
        bench=[
            '--backbone', 'resnet18', '--img-size', '32', '--batch', '4',
            '--queue-size', '64', '--steps', '1', '--warmup', '0', '--threads',
            str(torch.get_num_threads())
        ],
        # each path once (a CPU compiles kernels for every new layout and
        # dtype, which is most of the time at this size)
        bench_combos=[('off', 'off'), ('on', 'on')],
        augment_batches=['2'],
        knn=[
            '--bank', '20000', '--queries', '500', '--dim', '128', '--classes',
            '100'
        ],
        dist_iters=2,
        detection=[
            '--size', '64', '--batch', '1', '--rois', '8', '--repeats', '1'
        ]))
# the loss must fall below the control's; judged from this many iterations
MIN_ITERS_TO_JUDGE = 50


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--device',
        choices=['auto', 'cuda', 'cpu'],
        default='auto',
        help='auto: cuda when visible, else cpu (toy sizes)')
    parser.add_argument(
        '--steps', nargs='+', choices=STEPS, default=list(STEPS))
    parser.add_argument('--config', default=CONFIG)
    parser.add_argument(
        '--iters', type=int, default=None, help='training iterations')
    parser.add_argument('--batch', type=int, default=None)
    parser.add_argument(
        '--workers', type=int, default=None, help='data loader workers')
    parser.add_argument(
        '--pytest-k',
        default=None,
        help='only the device tests matching this pytest -k expression')
    parser.add_argument('--work-dir', default=None)
    parser.add_argument(
        '--out',
        default=osp.join('work_dirs', 'gpu_check', 'gpu_check.json'),
        help='the JSON report')
    parser.add_argument(
        '--dist-worker',
        action='store_true',
        help='(internal) a process of the multi_gpu step, under torchrun')
    args = parser.parse_args(argv)
    args.launcher = 'pytorch' if args.dist_worker else 'none'
    if args.device == 'auto':
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: torch sees no CUDA device')
    return args


# ----------------------------------------------------------------- steps


def run_device_tests(args, size, work_dir) -> dict:
    """pytest on the tests that take the `device` fixture, on this device."""
    junit = osp.join(work_dir, 'device_tests.xml')
    cmd = [
        sys.executable, '-m', 'pytest', '-q', '-rs', '-p', 'no:cacheprovider',
        '-W', 'ignore', '-m', 'device', '--device', args.device,
        f'--junitxml={junit}'
    ] + DEVICE_TESTS
    if args.pytest_k:
        cmd += ['-k', args.pytest_k]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True)
    counts = dict(tests=0, failures=0, errors=0, skipped=0)
    failed = []
    if osp.exists(junit):
        for suite in ET.parse(junit).getroot().iter('testsuite'):
            for key in counts:
                counts[key] += int(suite.get(key, 0))
        for case in ET.parse(junit).getroot().iter('testcase'):
            if case.find('failure') is not None or case.find(
                    'error') is not None:
                failed.append(f"{case.get('classname')}::{case.get('name')}")
    counts['passed'] = (
        counts['tests'] - counts['failures'] - counts['errors'] -
        counts['skipped'])
    ran = counts['passed'] > 0
    return dict(
        command=' '.join(cmd[1:]),
        returncode=proc.returncode,
        seconds=round(time.perf_counter() - start, 1),
        failed=failed,
        output_tail=proc.stdout[-3000:],
        checks=dict(pytest_passed=proc.returncode == 0, ran_tests=ran),
        **counts)


def run_train(args, size, work_dir) -> dict:
    """The MoCo v2 R50 config on synthetic images: AMP off/on, lr 0."""
    iters = args.iters or size['iters']
    runs = dict(
        amp_off=dict(),
        amp_on=dict(amp=True),
        control_lr0=dict(lr=0.),
    )
    if args.device == 'cuda':
        runs['amp_off_cudnn_benchmark'] = dict(cudnn_benchmark=True)
        runs['bf16'] = dict(bf16=True)
        runs['channels_last'] = dict(channels_last=True)
    out = {}
    for name, options in runs.items():
        cfg = pretrain_cfg(args, size, osp.join(work_dir, name), iters,
                           **options)
        out[name] = train_figures(cfg, args.device)
    window = max(1, iters // 5)
    control = out['control_lr0']['loss_last']
    checks = {}
    for name, figures in out.items():
        checks[f'{name}_loss_finite'] = figures['loss_finite']
        checks[f'{name}_ran_all_iterations'] = figures['iterations'] == iters
    judged = iters >= MIN_ITERS_TO_JUDGE
    for name in out:
        if name != 'control_lr0' and judged:
            checks[f'{name}_loss_below_lr0_control'] = \
                out[name]['loss_last'] < control
    note = (f'loss_last = mean of the last {window} losses; trained runs '
            'must end below the lr-0 control')
    if not judged:
        note += (f' (not judged below {MIN_ITERS_TO_JUDGE} iterations: '
                 f'{iters} here)')
    return dict(runs=out, iterations=iters, note=note, checks=checks)


def run_exact_resume(args, size, work_dir) -> dict:
    """N iterations against N/2 + resume + N/2, deterministic."""
    iters = size['resume_iters']
    if args.iters:
        iters = max(2, min(iters, args.iters))
    half = iters // 2
    full_dir, resumed_dir = (
        osp.join(work_dir, n) for n in ('full', 'resumed'))
    options = dict(deterministic=True, checkpoint_interval=half)
    full = train_runner(
        pretrain_cfg(args, size, full_dir, iters, **options), args.device)
    middle = osp.join(full_dir, f'iter_{half}.pth')
    resumed = train_runner(
        pretrain_cfg(
            args, size, resumed_dir, iters, resume_from=middle, **options),
        args.device)
    barrier()  # (distributed: rank 0 has written the checkpoints)
    a = checkpoint_tensors(osp.join(full_dir, f'iter_{iters}.pth'))
    b = checkpoint_tensors(osp.join(resumed_dir, f'iter_{iters}.pth'))
    diffs = {key: max_abs_difference(a[key], b[key]) for key in a if key in b}
    loss_full = full['losses'][half:]
    loss_resumed = resumed['losses'][-len(loss_full):]
    worst = sorted(diffs, key=diffs.get, reverse=True)[:5]
    equal = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return dict(
        iterations=iters,
        resumed_at=half,
        tensors=len(a),
        largest_differences={k: diffs[k]
                             for k in worst},
        losses_after_resume=dict(full=loss_full, resumed=loss_resumed),
        checks=dict(
            same_tensors=a.keys() == b.keys(),
            bitwise_equal=equal,
            same_losses_after_resume=loss_full == loss_resumed,
            queue_compared='model/queue.keys' in a))


def run_benchmark(args, size, work_dir) -> dict:
    """benchmark.py train: ours vs mmpretrain vs floor, AMP x channels_last.
    """
    bench = benchmark_command('train')
    out, checks = {}, {}
    combos = [(a, c, False) for a, c in size['bench_combos']]
    if args.device == 'cuda':  # fixed-size crops: does autotuning pay?
        combos += [('off', 'off', True), ('on', 'on', True)]
    for amp, channels_last, cudnn_benchmark in combos:
        name = f'amp_{amp}-channels_last_{channels_last}'
        if cudnn_benchmark:
            name += '-cudnn_benchmark'
        breakdown = (
            args.device == 'cuda' and amp == channels_last == 'off'
            and not cudnn_benchmark)
        argv = size['bench'] + [
            '--device', args.device, '--amp', amp, '--channels-last',
            channels_last, '--json',
            osp.join(work_dir, f'{name}.json'), '--breakdown',
            'on' if breakdown else 'off'
        ]
        flags = torch_flags()
        torch.backends.cudnn.benchmark = cudnn_benchmark
        try:
            result = bench.main(argv)
        finally:
            restore_torch_flags(flags)
        run = result['runs'][0]
        out[name] = dict(
            median_ms={
                impl: round(step['median_ms'], 2)
                for impl, step in run['steps'].items()
            },
            paired_ratio=run.get('paired_ratio'),
            breakdown_ours_ms=run.get('breakdown_ours_ms'))
        checks[f'{name}_timed'] = all(
            math.isfinite(ms) and ms > 0
            for ms in out[name]['median_ms'].values())
    augment = benchmark_command('device-augment').main([
        '--batches', *size['augment_batches'], '--rounds', '3', '--decode',
        '--threads',
        str(torch.get_num_threads())
    ])
    decode = decode_repeats(args.device)
    checks['decode_repeatable'] = decode.pop('repeatable')
    return dict(
        machine=result['machine'],
        argv=' '.join(size['bench']),
        runs=out,
        device_augment={k: augment[k]
                        for k in ('batched', 'decode')},
        decode=decode,
        checks=checks)


def decode_repeats(device: str, repeats: int = 3) -> dict:
    """The views of one batch of JPEGs decoded and cropped on ``device``
    ``repeats`` times, other work on the device's current stream in
    between (it frees memory the next decode may be given): the same
    views each time, and how far they are from the CPU decoder's."""
    from mocoplug.models.utils.batch_augments import decode_views
    bench = benchmark_command('device-augment')
    preprocessor, _ = bench.build_preprocessor(bench.V2_DECODE, device)
    sizes, modes = preprocessor._crop_geometry()
    with tempfile.TemporaryDirectory() as folder:
        inputs = bench.encoded_batch(bench.make_images(folder, 8),
                                     16)['inputs']
    args = (inputs['encoded'], inputs['exif_orientation'],
            inputs['crop_boxes'], inputs['flips'], sizes, modes)
    runs, side = [], 2048 if device == 'cuda' else 64
    for _ in range(repeats):
        busy = torch.randn(side, side, device=device)
        busy = busy @ busy  # queued before the decode, freed after it
        runs.append(decode_views(*args, torch.device(device)))
        del busy
    cpu = decode_views(*args, torch.device('cpu'))
    difference = torch.cat([(a.cpu().float() - b.float()).abs().flatten()
                            for a, b in zip(runs[0], cpu)])
    return dict(
        repeatable=all(
            torch.equal(a, b) for run in runs[1:]
            for a, b in zip(run, runs[0])),
        vs_cpu_max_grey_levels=difference.max().item(),
        vs_cpu_mean_grey_levels=round(difference.mean().item(), 3))


def run_knn(args, size, work_dir) -> dict:
    """benchmark.py knn at ImageNet size (toy size on a CPU)."""
    knn = benchmark_command('knn')
    argv = ['--device', args.device, '--json', osp.join(work_dir, 'knn.json')]
    result = knn.main(size['knn'] + argv)
    accuracy = result['sharded']['accuracy']
    return dict(
        **{k: result[k]
           for k in ('machine', 'features_mib')},
        config={
            k: result['config'][k]
            for k in ('bank', 'queries', 'dim', 'bank_dtype', 'topk')
        },
        sharded=result['sharded'],
        checks=dict(
            accuracy_in_range=all(0 <= v <= 100 for v in accuracy.values())))


def run_multi_gpu(args, size, work_dir) -> dict:
    """The multi-process runs under torchrun (see the module docstring),
    and the same MoCo v2 run in this process for the scaling."""
    procs = torch.cuda.device_count() if args.device == 'cuda' else 2
    if procs < 2:
        return dict(skipped=f'{procs} GPU visible: needs 2 or more')
    iters = args.iters or size['dist_iters']
    cmd = [
        sys.executable, '-m', 'torch.distributed.run', '--standalone',
        f'--nproc_per_node={procs}',
        osp.abspath(__file__), '--dist-worker', '--device', args.device,
        '--iters',
        str(iters), '--work-dir', work_dir
    ]
    for option in ('batch', 'workers'):
        if getattr(args, option) is not None:
            cmd += [f'--{option}', str(getattr(args, option))]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True)
    paths = [osp.join(work_dir, f'rank{r}.json') for r in range(procs)]
    if proc.returncode or not all(osp.exists(p) for p in paths):
        raise RuntimeError(f'torchrun exited with {proc.returncode}:\n' +
                           proc.stdout[-3000:])
    ranks = []
    for path in paths:
        with open(path) as f:
            ranks.append(json.load(f))
    one = train_figures(
        pretrain_cfg(args, size, osp.join(work_dir, 'one_process'), iters),
        args.device)
    per_gpu = ranks[0]['runs']['mocov2_shuffle_bn']['images_per_s']
    checks = {
        f'{name}_loss_finite': all(r['runs'][name]['loss_finite']
                                   for r in ranks)
        for name in ranks[0]['runs']
    }
    checks.update(ranks[0]['checks'])
    return dict(
        processes=procs,
        backend='nccl' if args.device == 'cuda' else 'gloo',
        iterations=iters,
        runs={
            name: {
                k: v
                for k, v in run.items() if k != 'losses'
            }
            for name, run in ranks[0]['runs'].items()
        },
        exact_resume=ranks[0]['exact_resume'],
        knn=ranks[0]['knn'],
        images_per_s_per_gpu=per_gpu,
        images_per_s_one_gpu=one['images_per_s'],
        scaling=round(procs * per_gpu / one['images_per_s'], 2),
        checks=checks)


def dist_worker(args) -> None:
    """One process of the multi_gpu step: train each run, the exact resume
    and the sharded kNN; rank r writes rank{r}.json to the work dir."""
    from mmengine.dist import get_rank
    size = SIZES[args.device]
    runs = dict(
        mocov2_shuffle_bn=CONFIG,
        mocov3_gathered_keys=V3_CONFIG,
        mocov2_device_augment=V2_DEVICE_AUG)
    out = dict(runs={})
    for name, config in runs.items():
        args.config = config
        out['runs'][name] = train_figures(
            pretrain_cfg(args, size, osp.join(args.work_dir, name),
                         args.iters), args.device)
        barrier()
    args.config = CONFIG
    out['exact_resume'] = run_exact_resume(
        args, size, osp.join(args.work_dir, 'exact_resume'))
    out['knn'] = sharded_knn_check(args.device)
    out['checks'] = dict(
        exact_resume_bitwise_equal=out['exact_resume']['checks']
        ['bitwise_equal'],
        sharded_knn_as_whole_sets=out['knn'].pop('same_accuracy'))
    with open(osp.join(args.work_dir, f'rank{get_rank()}.json'), 'w') as f:
        json.dump(out, f, default=str)
    barrier()


def sharded_knn_check(device: str, size=4000, queries=400) -> dict:
    """The kNN of shards of random features (one per rank) against the kNN
    of the whole sets in one process: a near-tie at the k-th neighbour
    (float32 sums in another order) may change one query's vote, so the
    accuracies may differ by one query (100 / queries)."""
    from mmengine.dist import get_dist_info

    from mocoplug.evaluation import (FeatureShard,
                                     sharded_weighted_knn_accuracy,
                                     weighted_knn_accuracy)
    rank, world_size = get_dist_info()
    gen = torch.Generator().manual_seed(0)

    def features(num):
        feats = torch.nn.functional.normalize(
            torch.randn(num, 64, generator=gen), dim=1)
        return feats, torch.randint(0, 10, (num, ), generator=gen)

    def shard(feats, labels):
        ids = torch.arange(len(feats))[rank::world_size]
        return FeatureShard(*(t.to(device)
                              for t in (feats[ids], labels[ids], ids)))

    bank, query = features(size), features(queries)
    sharded = sharded_weighted_knn_accuracy(
        shard(*query), shard(*bank), 10, (20, 200))
    whole = weighted_knn_accuracy(*query, *bank, 10, (20, 200))
    return dict(
        sharded=sharded,
        whole=whole,
        same_accuracy=all(
            abs(sharded[k] - whole[k]) <= 100 / queries + 1e-6 for k in whole))


# -------------------------------------------------------- runs from config


def pretrain_cfg(args,
                 size: dict,
                 work_dir: str,
                 iters: int,
                 amp: bool = False,
                 bf16: bool = False,
                 channels_last: bool = False,
                 lr: Optional[float] = None,
                 cudnn_benchmark: bool = False,
                 deterministic: bool = False,
                 checkpoint_interval: Optional[int] = None,
                 resume_from: Optional[str] = None) -> Config:
    """The pretraining config with synthetic images, ``iters`` iterations
    and one GPU's settings (or the CPU toy sizes); each process of a
    distributed run (``args.launcher``) keeps the config's Shuffle BN."""
    cfg = Config.fromfile(args.config)
    cfg.work_dir = work_dir
    cfg.launcher = args.launcher
    cfg.log_level = 'WARNING'
    cfg.experiment_name = (f'gpu_check-{osp.basename(work_dir)}-'
                           f'{os.getpid()}-{time.time_ns()}')
    model = cfg.model
    if 'shuffle_bn' in model and args.launcher == 'none':
        model.shuffle_bn = 'split'  # one process: BN over batch slices
        model.num_splits = size['num_splits']
    if args.device == 'cpu':  # torch's SyncBN and AMP need a GPU
        cfg.model = model = without_sync_bn(model)
        if cfg.optim_wrapper.get('type') == 'AmpOptimWrapper':
            cfg.optim_wrapper.pop('loss_scale', None)
            cfg.optim_wrapper.type = 'mocoplug.BF16OptimWrapper'
    model.channels_last = channels_last
    if model.backbone.depth != size['depth'] or 'width' in size:
        width = size.get('width', 64)
        model.backbone.update(
            depth=size['depth'], stem_channels=width, base_channels=width)
        model.neck.in_channels = model.neck.hid_channels = FEATURES[
            size['depth']] * width // 64
    batch = args.batch or size['batch']
    workers = size['workers'] if args.workers is None else args.workers
    loader = cfg.train_dataloader
    pipeline = [
        t for t in loader.dataset.pipeline
        if not t['type'].startswith('LoadImage')
    ]
    set_crop_size(pipeline, size['crop'])
    loader.dataset = dict(
        type='mocoplug.SyntheticImageDataset',
        num_images=iters * batch,
        img_size=size['image'],
        pipeline=pipeline)
    loader.update(
        batch_size=batch,
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory=args.device == 'cuda',
        sampler=dict(type='InfiniteSampler', shuffle=True))
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=iters)
    cfg.param_scheduler = [
        dict(type='CosineAnnealingLR', T_max=iters, by_epoch=False)
    ]
    cfg.default_hooks.checkpoint = dict(
        type='CheckpointHook',
        by_epoch=False,
        interval=checkpoint_interval or iters + 1,
        save_last=checkpoint_interval is not None)
    cfg.default_hooks.logger = dict(
        type='LoggerHook', interval=max(1, iters // 4))
    cfg.randomness = dict(seed=0, deterministic=deterministic)
    cfg.env_cfg.cudnn_benchmark = cudnn_benchmark
    if amp and args.device == 'cuda':  # what tools/train.py --amp sets
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.loss_scale = 'dynamic'
    elif amp or bf16:
        cfg.optim_wrapper.pop('loss_scale', None)
        cfg.optim_wrapper.type = 'mocoplug.BF16OptimWrapper'
    if lr is not None:
        cfg.optim_wrapper.optimizer.lr = lr
    if resume_from:
        cfg.resume, cfg.load_from = True, resume_from
    return cfg


def without_sync_bn(node):
    """A config with every ``SyncBN`` norm layer a plain BatchNorm of any
    dimension (a ``SplitBN`` of one slice)."""
    if isinstance(node, dict):
        node = type(node)({k: without_sync_bn(v) for k, v in node.items()})
        if node.get('type') == 'SyncBN':
            node.update(type='mocoplug.SplitBN', num_splits=1)
    elif isinstance(node, list):
        node = [without_sync_bn(v) for v in node]
    return node


def set_crop_size(pipeline, crop: int) -> None:
    """Every RandomResizedCrop in the pipeline (inside MultiView too)."""
    for t in pipeline:
        if t['type'] == 'RandomResizedCrop':
            t['scale'] = crop
        for inner in t.get('transforms', []):
            set_crop_size(inner if isinstance(inner, list) else [inner], crop)


def build_runner(cfg: Config):
    """As mmpretrain's and mmdet's tools/train.py build it."""
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner
    if 'runner_type' in cfg:
        return RUNNERS.build(cfg)
    return Runner.from_cfg(cfg)


def train_runner(cfg: Config, device: str) -> dict:
    """Train; return the per-iteration losses and times and the peak
    memory. Leaves the process's global torch settings as it found them."""
    flags = torch_flags()
    if device == 'cuda':
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    try:
        runner = build_runner(cfg)
        runner.train()
        hub = runner.message_hub
        losses = [float(v) for v in hub.get_scalar('train/loss').data[0]]
        times = [float(v) for v in hub.get_scalar('train/time').data[0]]
        data_times = [
            float(v) for v in hub.get_scalar('train/data_time').data[0]
        ]
        iterations = runner.iter
        del runner
    finally:
        restore_torch_flags(flags)
        gc.collect()
    seconds = time.perf_counter() - start
    if device == 'cuda':
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = peak_rss_mib()
    return dict(
        losses=losses,
        times=times,
        data_times=data_times,
        iterations=iterations,
        seconds=seconds,
        peak_mib=peak)


def train_figures(cfg: Config, device: str) -> dict:
    run = train_runner(cfg, device)
    losses, times = run['losses'], run['times']
    window = max(1, len(losses) // 5)
    steady = times[len(times) // 10 + 1:] or times  # after the warm-up
    batch = cfg.train_dataloader.batch_size
    return dict(
        iterations=run['iterations'],
        loss_first=round(statistics.mean(losses[:window]), 4),
        loss_last=round(statistics.mean(losses[-window:]), 4),
        loss_max_window=round(
            max(
                statistics.mean(losses[i:i + window])
                for i in range(len(losses) - window + 1)), 4),
        loss_finite=all(math.isfinite(v) for v in losses),
        losses=[round(v, 4) for v in losses],
        images_per_s=round(batch / statistics.median(steady), 1),
        data_wait_share=round(
            statistics.median(run['data_times'][len(times) // 10 + 1:]
                              or run['data_times']) /
            statistics.median(steady), 3),
        seconds=round(run['seconds'], 1),
        peak_memory_mib=round(run['peak_mib']),
        memory_kind='CUDA max_memory_allocated'
        if device == 'cuda' else 'process peak RSS')


def torch_flags():
    return (torch.are_deterministic_algorithms_enabled(),
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)


def restore_torch_flags(flags) -> None:
    """mmengine's Runner sets these for the whole process."""
    torch.use_deterministic_algorithms(flags[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = \
        flags[1:]


def max_abs_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    if not a.numel():
        return 0.
    return (a.double() - b.double()).abs().max().item()


def checkpoint_tensors(path: str) -> Dict[str, torch.Tensor]:
    """Every tensor of a checkpoint's model and optimizer state."""
    ckpt = torch.load(path, map_location='cpu', weights_only=False)
    out = {f'model/{k}': v for k, v in ckpt['state_dict'].items()}
    for pid, state in ckpt['optimizer']['state'].items():
        for name, value in state.items():
            if torch.is_tensor(value):
                out[f'optimizer/{pid}/{name}'] = value
    return out


def peak_rss_mib() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def benchmark_command(name: str):
    """The module of a sub-command of tools/benchmarks/benchmark.py."""
    if osp.join(ROOT, 'tools') not in sys.path:  # last: see benchmark.py
        sys.path.append(osp.join(ROOT, 'tools'))
    from benchmarks.benchmark import command_module
    return command_module(name)


# ------------------------------------------------------------------ main


def environment(args) -> dict:
    env = dict(
        python=platform.python_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cpu_count=os.cpu_count())
    for name in ('mmengine', 'mmcv', 'mmpretrain', 'mocoplug'):
        try:
            env[name] = __import__(name).__version__
        except Exception as exc:  # noqa: BLE001  (reported, not fatal)
            env[name] = f'unavailable: {exc}'
    try:  # mmcv-lite (the GPU machine's wheels) has no compiled ops
        from mocoplug.compat.mmcv_ops import serve_mmcv_ops
        env['mmcv_ops'] = serve_mmcv_ops() is None
    except ImportError:
        env['mmcv_ops'] = False
    if args.device == 'cuda':
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cudnn=torch.backends.cudnn.version())
    return env


def run_detection(args, size, work_dir) -> dict:
    """benchmark.py detection-ops: a detector's training step and test pass
    on the device, on the mmcv kernels mocoplug serves."""
    argv = size['detection'] + ['--device', args.device]
    result = benchmark_command('detection-ops').main(argv)
    result['checks'] = dict(
        losses_finite=result['losses_finite'],
        boxes_predicted=result['boxes_per_pass'] > 0)
    return result


RUNNERS = dict(
    device_tests=run_device_tests,
    train=run_train,
    exact_resume=run_exact_resume,
    benchmark=run_benchmark,
    knn=run_knn,
    multi_gpu=run_multi_gpu,
    detection=run_detection)


def run_step(name: str, fn: Callable, args, size, work_dir) -> dict:
    print(f'\n=== {name} ===', flush=True)
    start = time.perf_counter()
    step_dir = osp.join(work_dir, name)
    os.makedirs(step_dir, exist_ok=True)
    try:
        result = fn(args, size, step_dir)
        failed = [k for k, ok in result.get('checks', {}).items() if not ok]
        result['status'] = 'failed' if failed else 'ok'
        if failed:
            result['failed_checks'] = failed
    except Exception:  # noqa: BLE001  (the report says what broke)
        result = dict(status='error', error=traceback.format_exc()[-4000:])
        print(result['error'], flush=True)
    result['step_seconds'] = round(time.perf_counter() - start, 1)
    return result


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.dist_worker:
        return dist_worker(args)
    size = SIZES[args.device]
    mode = (f'{args.device}: the shipped sizes' if args.device == 'cuda' else
            'cpu: toy sizes (no CUDA device; ResNet-18, 32 px crops, a few '
            'iterations: the code paths, not the figures of a GPU)')
    work_dir = args.work_dir or tempfile.mkdtemp(prefix='gpu_check_')
    report = dict(
        mode=mode,
        started=time.strftime('%Y-%m-%d %H:%M:%S'),
        environment=environment(args),
        sizes=dict(size),
        work_dir=work_dir,
        steps={})
    print(f'gpu_check: {mode}; work dir {work_dir}', flush=True)
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    for name in args.steps:
        report['steps'][name] = run_step(name, RUNNERS[name], args, size,
                                         work_dir)
        report['ok'] = all(s['status'] == 'ok'
                           for s in report['steps'].values())
        # after every step: a run stopped by a time limit keeps the others
        with open(args.out, 'w') as f:
            json.dump(report, f, indent=1, default=str)
    print_table(report)
    print(f'wrote {args.out}')
    return report


def summary(name: str, step: dict) -> str:
    """One line of figures per step."""
    if step['status'] == 'error':
        return step['error'].strip().splitlines()[-1][:100]
    if name == 'device_tests':
        return (f"{step['passed']} passed, {step['failures']} failed, "
                f"{step['errors']} errors, {step['skipped']} skipped")
    if name == 'train':
        return '; '.join(
            f"{run}: loss {r['loss_first']:.2f}->{r['loss_last']:.2f}, "
            f"{r['images_per_s']:.0f} img/s, {r['peak_memory_mib']} MiB"
            for run, r in step['runs'].items())
    if name == 'exact_resume':
        return (f"bitwise equal: {step['checks']['bitwise_equal']} "
                f"({step['tensors']} tensors, resumed at "
                f"{step['resumed_at']}/{step['iterations']})")
    if name == 'benchmark':
        runs = []
        for run, r in step['runs'].items():
            times = ', '.join(f'{i} {ms:.1f}'
                              for i, ms in r['median_ms'].items())
            runs.append(f'{run}: {times} ms')
        return '; '.join(runs)
    if name == 'knn':
        s = step['sharded']
        return (f"{step['config']['bank']} x {step['config']['dim']} memory, "
                f"{step['config']['queries']} queries: {s['seconds']:.1f} s, "
                f"+{s['peak_extra_mib']:.0f} MiB")
    if name == 'multi_gpu':
        if 'skipped' in step:
            return f"skipped: {step['skipped']}"
        return (f"{step['processes']} x {step['backend']}: "
                f"{step['images_per_s_per_gpu']:.0f} img/s per GPU, "
                f"scaling {step['scaling']:.2f} vs one")
    if name == 'detection':
        return '; '.join(f"{r['step']} ({r['kernels']}) {r['median']} ms"
                         for r in step['rows'])
    return ''


def print_table(report: dict, out: Callable = print) -> None:
    env = report['environment']
    out(f"\ngpu_check ({report['mode']}); torch {env['torch']}, "
        f"{env.get('gpu', 'no GPU')}")
    out('| step | status | seconds | figures |')
    out('|---|---|---|---|')
    for name, step in report['steps'].items():
        status = step['status']
        if step.get('failed_checks'):
            status += ' (' + ', '.join(step['failed_checks']) + ')'
        out(f"| {name} | {status} | {step['step_seconds']} | "
            f'{summary(name, step)} |')
    out(f"all ok: {report['ok']}")


if __name__ == '__main__':
    result = main()
    sys.exit(0 if result is None or result['ok'] else 1)
