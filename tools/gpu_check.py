# Copyright (c) mocoplug contributors. All rights reserved.
"""mocoplug's first contact with a GPU: one command, one JSON report, a
table; CPU toy mode without CUDA. The steps (``--steps``):
docs/user_guides/performance.md."""
import argparse
import contextlib
import gc
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
from subprocess import PIPE, STDOUT

os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')

import mmengine  # noqa: E402
import torch  # noqa: E402
from mmengine.config import Config  # noqa: E402
from mmengine.dist import barrier, get_dist_info, get_rank  # noqa: E402

from mocoplug.utils import walk_dicts  # noqa: E402

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG = osp.join(ROOT, 'configs',
                  'mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py')
STEPS = ('device_tests', 'train', 'exact_resume', 'benchmark', 'knn',
         'multi_gpu', 'detection', 'detection_zoo')
V2_DEVICE_AUG = CONFIG.replace('.py', '_device-aug.py')
V3_CONFIG = osp.join(ROOT, 'configs',
                     'mocov3/mocov3_r50_8xb512-amp-coslr-100e_in1k.py')
FEATURES = {18: 512, 50: 2048}
THREADS = ['--threads', str(torch.get_num_threads())]
DCNV2 = 'dcnv2/faster-rcnn_r50-mdconv-c3-c5_fpn_1x_coco.py'  # in mmdet's zoo
SIZE_KEYS = ('depth', 'width', 'crop', 'image', 'batch', 'num_splits',
             'workers', 'iters', 'resume_iters')  # width: stem, base channels
SIZES = dict(
    cuda=dict(
        zip(SIZE_KEYS, (50, 64, 224, 256, 32, 8, 8, 200, 40)),
        bench=('--backbone resnet50 --img-size 224 --batch 32 '
               '--queue-size 65536 --steps 20 --warmup 5').split(),
        bench_combos=[('off', 'off', False), ('off', 'on', False),
                      ('on', 'off', False), ('on', 'on', False),
                      ('off', 'off', True), ('on', 'on', True),
                      ('bf16', 'on', False,
                       '--compile max-autotune --batch 64')],
        augment='--batches 32 256'.split(),
        knn=[],  # benchmark_knn's defaults: ImageNet size
        dist_iters=50,
        detection='--size 512 --batch 2 --rois 512'.split(),
        zoo=[]),  # its 24 configs at 128 px
    cpu=dict(
        zip(SIZE_KEYS, (18, 16, 32, 40, 8, 2, 0, 4, 4)),
        bench=('--backbone resnet18 --img-size 32 --batch 4 --queue-size 64 '
               '--steps 1 --warmup 0').split() + THREADS,
        bench_combos=[('off', 'off', False), ('on', 'on', False)],
        augment=['--batches', '2'],
        knn='--bank 20000 --queries 500 --dim 128 --classes 100'.split(),
        dist_iters=2,
        detection='--size 64 --batch 1 --rois 8 --repeats 1'.split(),
        zoo=['--size', '64', '--configs', DCNV2]))
MIN_ITERS_TO_JUDGE = 50  # loss below the lr-0 control's: judged from here


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument(
        '--device',
        choices=['auto', 'cuda', 'cpu'],
        default='auto',
        help='auto: cuda when visible, else cpu (toy sizes)')
    p.add_argument('--steps', nargs='+', choices=STEPS, default=list(STEPS))
    p.add_argument('--config', default=CONFIG)
    for option in ('--iters', '--batch', '--workers'):
        p.add_argument(option, type=int)
    p.add_argument(
        '--pytest-k', help='only the device tests matching this -k expression')
    p.add_argument('--work-dir')
    p.add_argument(
        '--out', default=osp.join('work_dirs', 'gpu_check', 'gpu_check.json'))
    p.add_argument(
        '--dist-worker', action='store_true', help='(internal, torchrun)')
    args = p.parse_args(argv)
    args.launcher = 'pytorch' if args.dist_worker else 'none'
    if args.device == 'auto':
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if args.device == 'cuda' and not torch.cuda.is_available():
        p.error('--device cuda: torch sees no CUDA device')
    return args


def run_device_tests(args, size, work_dir) -> dict:
    """``pytest -m device --device DEVICE tests``: every test that takes the
    `device` fixture (tests/conftest.py marks them), on this device."""
    junit = osp.join(work_dir, 'device_tests.xml')
    cmd = [
        sys.executable, '-m', 'pytest', '-q', '-rs', '-p', 'no:cacheprovider',
        '-W', 'ignore', '-m', 'device', '--device', args.device,
        f'--junitxml={junit}', 'tests'
    ] + (['-k', args.pytest_k] if args.pytest_k else [])
    proc = subprocess.run(cmd, cwd=ROOT, stdout=PIPE, stderr=STDOUT, text=True)
    root = ET.parse(junit).getroot() if osp.exists(junit) else ET.Element('')
    tags = dict(
        passed='passed', failures='failure', errors='error', skipped='skipped')
    outcome = {  # a test's first failure, error or skip tag, else 'passed'
        f"{c.get('classname')}::{c.get('name')}":
        next((e.tag for e in c if e.tag in tags.values()), 'passed')
        for c in root.iter('testcase')
    }
    kinds = list(outcome.values())
    counts = {count: kinds.count(tag) for count, tag in tags.items()}
    return dict(
        command=' '.join(cmd[1:]),
        returncode=proc.returncode,
        tests=len(kinds),
        failed=[n for n, o in outcome.items() if o in ('failure', 'error')],
        output_tail=proc.stdout[-3000:],
        checks=dict(
            pytest_passed=proc.returncode == 0, ran_tests='passed' in kinds),
        figures=('{passed} passed, {failures} failed, {errors} errors, '
                 '{skipped} skipped').format(**counts),
        **counts)


def run_train(args, size, work_dir) -> dict:
    """The MoCo v2 R50 config on synthetic images: AMP off/on, lr 0."""
    iters = args.iters or size['iters']
    runs = dict(amp_off={}, amp_on=dict(amp=True), control_lr0=dict(lr=0.))
    if args.device == 'cuda':
        runs.update(amp_off_cudnn_benchmark=dict(cudnn_benchmark=True))
        runs.update((flag, {flag: True}) for flag in ('bf16', 'channels_last'))
    out = {}
    for name, kw in runs.items():
        out[name] = train_runner(args, size, osp.join(work_dir, name), iters,
                                 **kw)
    checks, judged = {}, iters >= MIN_ITERS_TO_JUDGE
    for name, fig in out.items():
        checks[f'{name}_loss_finite'] = fig['loss_finite']
        checks[f'{name}_ran_all_iterations'] = fig['iterations'] == iters
        if name != 'control_lr0' and judged:
            checks[f'{name}_loss_below_lr0_control'] = \
                fig['loss_last'] < out['control_lr0']['loss_last']
    note = (f'loss_last = mean of the last {max(1, iters // 5)} losses; '
            'trained runs must end below the lr-0 control' +
            ('' if judged else
             f' (not judged below {MIN_ITERS_TO_JUDGE} iterations)'))
    figures = '; '.join(
        f"{n}: loss {r['loss_first']:.2f}->{r['loss_last']:.2f}, "
        f"{r['images_per_s']:.0f} img/s, {r['peak_memory_mib']} MiB"
        for n, r in out.items())
    return dict(
        runs=out, iterations=iters, note=note, checks=checks, figures=figures)


def run_exact_resume(args, size, work_dir) -> dict:
    """N iterations against N/2 + resume + N/2, deterministic."""
    iters = max(2, min(size['resume_iters'], args.iters or math.inf))
    half = iters // 2
    dirs = [osp.join(work_dir, n) for n in ('full', 'resumed')]
    options = dict(deterministic=True, checkpoint_interval=half)
    full = train_runner(args, size, dirs[0], iters, **options)
    options['resume_from'] = osp.join(dirs[0], f'iter_{half}.pth')
    resumed = train_runner(args, size, dirs[1], iters, **options)
    barrier()  # (distributed: rank 0 has written the checkpoints)
    a, b = (checkpoint_tensors(osp.join(d, f'iter_{iters}.pth')) for d in dirs)
    diffs = {
        k: (a[k].double() - b[k].double()).abs().max().item()
        for k in a if k in b and a[k].numel()
    }
    loss_full = full['losses'][half:]
    loss_resumed = resumed['losses'][-len(loss_full):]
    equal = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return dict(
        iterations=iters,
        resumed_at=half,
        tensors=len(a),
        largest_differences=dict(
            sorted(diffs.items(), key=lambda kv: -kv[1])[:5]),
        losses_after_resume=dict(full=loss_full, resumed=loss_resumed),
        checks=dict(
            same_tensors=a.keys() == b.keys(),
            bitwise_equal=equal,
            same_losses_after_resume=loss_full == loss_resumed,
            queue_compared='model/queue.keys' in a),
        figures=f'bitwise equal: {equal} ({len(a)} tensors, resumed at '
        f'{half}/{iters})')


def bench_argv(device: str, size: dict, combo: tuple) -> tuple:
    """The run name and benchmark.py train options of a bench combo."""
    amp, channels_last, autotune, *more = combo
    name = f'amp_{amp}-channels_last_{channels_last}' + (
        '-cudnn_benchmark' if autotune else '') + ('-compiled' * len(more))
    breakdown = device == 'cuda' and combo == ('off', 'off', False)
    return name, size['bench'] + (
        f'--device {device} --amp {amp} --channels-last {channels_last} '
        f"--breakdown {'on' if breakdown else 'off'} {' '.join(more)}"
    ).split()


def run_benchmark(args, size, work_dir) -> dict:
    """benchmark.py train (AMP x channels_last x cuDNN autotuning,
    compiled), device-augment --decode."""
    bench = benchmark_command('train')
    out, checks = {}, {}
    keep = ('first_step_ms', 'paired_ratio', 'breakdown_ours_ms')
    for combo in size['bench_combos']:
        name, argv = bench_argv(args.device, size, combo)
        with kept_torch_flags():
            torch.backends.cudnn.benchmark = combo[2]
            result = bench.main(
                argv + ['--json', osp.join(work_dir, name + '.json')])
        run = result['runs'][0]
        ms = {i: round(s['median_ms'], 2) for i, s in run['steps'].items()}
        out[name] = dict(median_ms=ms, **{k: run.get(k) for k in keep})
        checks[f'{name}_timed'] = all(
            math.isfinite(t) and t > 0 for t in ms.values())
    augment = benchmark_command('device-augment').main(
        size['augment'] + ['--rounds', '3', '--decode'] + THREADS)
    decode = decode_repeats(args.device)
    checks['decode_repeatable'] = decode.pop('repeatable')
    return dict(
        machine=result['machine'],
        argv=' '.join(size['bench']),
        runs=out,
        device_augment=augment,
        decode=decode,
        checks=checks,
        figures='; '.join(f'{run}: ' +
                          ', '.join(f'{i} {t:.1f}'
                                    for i, t in r['median_ms'].items()) + ' ms'
                          for run, r in out.items()))


def decode_repeats(device: str, repeats: int = 3) -> dict:
    """One batch of JPEGs decoded ``repeats`` times between other work on
    ``device``: the same views each time? How far from the CPU's?"""
    from mocoplug.models.utils.batch_augments import decode_views
    bench = benchmark_command('device-augment')
    preprocessor = bench.build_preprocessor(bench.V2_DECODE, device)
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
    result = benchmark_command('knn').main(size['knn'] +
                                           ['--device', args.device])
    config, sharded = result['config'], result['sharded']
    in_range = all(0 <= v <= 100 for v in sharded['accuracy'].values())
    result['checks'] = dict(accuracy_in_range=in_range)
    result['figures'] = (
        f"{config['bank']} x {config['dim']} memory, {config['queries']} "
        f"queries: {sharded['seconds']:.1f} s, "
        f"+{sharded['peak_extra_mib']:.0f} MiB")
    return result


def run_multi_gpu(args, size, work_dir) -> dict:
    """``dist_worker`` under torchrun; one process for the scaling."""
    procs = torch.cuda.device_count() if args.device == 'cuda' else 2
    if procs < 2:
        skipped = f'{procs} GPU visible: needs 2 or more'
        return dict(skipped=skipped, figures=f'skipped: {skipped}')
    iters = args.iters or size['dist_iters']
    cmd = [
        sys.executable, '-m', 'torch.distributed.run', '--standalone',
        f'--nproc_per_node={procs}',
        osp.abspath(__file__), '--dist-worker', '--work-dir', work_dir
    ]
    for option in ('device', 'iters', 'batch', 'workers'):
        value = iters if option == 'iters' else getattr(args, option)
        cmd += [] if value is None else [f'--{option}', str(value)]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=PIPE, stderr=STDOUT, text=True)
    paths = [osp.join(work_dir, f'rank{r}.json') for r in range(procs)]
    if proc.returncode or not all(osp.exists(p) for p in paths):
        raise RuntimeError(f'torchrun exited with {proc.returncode}:\n' +
                           proc.stdout[-3000:])
    ranks = [mmengine.load(p) for p in paths]
    one = train_runner(args, size, osp.join(work_dir, 'one_process'), iters)
    first = ranks[0]
    per_gpu = first['runs']['mocov2_shuffle_bn']['images_per_s']
    scaling = round(procs * per_gpu / one['images_per_s'], 2)
    checks = {
        f'{name}_loss_finite': all(r['runs'][name]['loss_finite']
                                   for r in ranks)
        for name in first['runs']
    }
    for run in first['runs'].values():
        del run['losses']
    backend = 'nccl' if args.device == 'cuda' else 'gloo'
    first.update(
        processes=procs,
        backend=backend,
        iterations=iters,
        images_per_s_per_gpu=per_gpu,
        images_per_s_one_gpu=one['images_per_s'],
        scaling=scaling,
        checks=dict(checks, **first['checks']),
        figures=f'{procs} x {backend}: {per_gpu:.0f} img/s per GPU, '
        f'scaling {scaling:.2f} vs one')
    return first


def dist_worker(args) -> None:
    """A multi_gpu process: the runs, exact resume, sharded kNN; rank r
    writes rank{r}.json."""
    size, out = SIZES[args.device], dict(runs={})
    runs = (('mocov2_shuffle_bn', CONFIG), ('mocov3_gathered_keys', V3_CONFIG),
            ('mocov2_device_augment', V2_DEVICE_AUG))
    for name, config in runs:
        args.config, work_dir = config, osp.join(args.work_dir, name)
        out['runs'][name] = train_runner(args, size, work_dir, args.iters)
        barrier()
    args.config = CONFIG
    resume = out['exact_resume'] = run_exact_resume(
        args, size, osp.join(args.work_dir, 'exact_resume'))
    out['knn'] = sharded_knn_check(args.device)
    out['checks'] = dict(
        exact_resume_bitwise_equal=resume['checks']['bitwise_equal'],
        sharded_knn_as_whole_sets=out['knn'].pop('same_accuracy'))
    mmengine.dump(
        out, osp.join(args.work_dir, f'rank{get_rank()}.json'), default=str)
    barrier()


def sharded_knn_check(device: str, size=4000, queries=400) -> dict:
    """The kNN of random features sharded per rank against the whole sets."""
    from mocoplug import evaluation as ev
    rank, world_size = get_dist_info()
    gen = torch.Generator().manual_seed(0)
    normalize = torch.nn.functional.normalize
    bank, query = ((normalize(torch.randn(n, 64, generator=gen), dim=1),
                    torch.randint(0, 10, (n, ), generator=gen))
                   for n in (size, queries))

    def shard(feats, labels):
        ids = torch.arange(len(feats))[rank::world_size]
        return ev.FeatureShard(*(t.to(device)
                                 for t in (feats[ids], labels[ids], ids)))

    sharded = ev.sharded_weighted_knn_accuracy(
        shard(*query), shard(*bank), 10, (20, 200))
    whole = ev.weighted_knn_accuracy(*query, *bank, 10, (20, 200))
    same = all(
        abs(sharded[k] - whole[k]) <= 100 / queries + 1e-6 for k in whole)
    return dict(sharded=sharded, whole=whole, same_accuracy=same)


def run_detection(args, size, work_dir) -> dict:
    """benchmark.py detection-ops on the mmcv kernels mocoplug serves."""
    result = benchmark_command('detection-ops').main(size['detection'] +
                                                     ['--device', args.device])
    result['checks'] = dict(
        losses_finite=result['losses_finite'],
        boxes_predicted=result['boxes_per_pass'] > 0)
    result['figures'] = '; '.join('{step} ({kernels}) {median} ms'.format(**r)
                                  for r in result['rows'])
    return result


def run_detection_zoo(args, size, work_dir) -> dict:
    """benchmark.py detection-zoo: mmdet's zoo configs, a training step and
    a test pass each, on this device (one config on a CPU)."""
    result = benchmark_command('detection-zoo').main(size['zoo'] +
                                                     ['--device', args.device])
    failed = [r['config'] for r in result['rows'] if r['status'] != 'ok']
    rows = len(result['rows'])
    result.update(
        failed=failed,
        checks=dict(all_configs_ok=rows > 0 and not failed),
        figures=f"{rows - len(failed)} of {rows} configs ok at "
        f"{result['size']} px ({result['mmcv']})")
    return result


def pretrain_cfg(args, size: dict, work_dir: str, iters: int,
                 **opts) -> Config:
    """The pretraining config on synthetic images at ``size``; a distributed
    run (``args.launcher``) keeps the config's Shuffle BN. ``opts``: the
    flags ``amp``, ``bf16``, ``channels_last``, ``cudnn_benchmark``,
    ``deterministic``; ``lr``, ``checkpoint_interval``, ``resume_from``."""
    cfg = Config.fromfile(args.config)
    cfg.update(work_dir=work_dir, launcher=args.launcher, log_level='WARNING')
    cfg.experiment_name = (f'gpu_check-{osp.basename(work_dir)}-'
                           f'{os.getpid()}-{time.time_ns()}')
    model, wrapper = cfg.model, cfg.optim_wrapper
    if 'shuffle_bn' in model and args.launcher == 'none':  # BN per slice
        model.shuffle_bn, model.num_splits = 'split', size['num_splits']
    if args.device == 'cpu':  # torch's SyncBN needs a GPU
        walk_dicts(
            model, lambda n: n.get('type') == 'SyncBN' and n.update(
                type='mocoplug.SplitBN', num_splits=1))
    model.channels_last = opts.get('channels_last', False)
    width = size['width']
    if model.backbone.depth != size['depth'] or width != 64:
        model.backbone.update(
            depth=size['depth'], stem_channels=width, base_channels=width)
        model.neck.in_channels = model.neck.hid_channels = FEATURES[
            size['depth']] * width // 64
    batch = args.batch or size['batch']
    workers = size['workers'] if args.workers is None else args.workers
    loader = cfg.train_dataloader
    steps = loader.dataset.pipeline
    pipeline = [t for t in steps if not t['type'].startswith('LoadImage')]
    walk_dicts(
        pipeline, lambda t: t.get('type') == 'RandomResizedCrop' and t.update(
            scale=size['crop']))
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
    cfg.param_scheduler = dict(
        type='CosineAnnealingLR', T_max=iters, by_epoch=False)
    interval = opts.get('checkpoint_interval')
    cfg.default_hooks.checkpoint = dict(
        type='CheckpointHook',
        by_epoch=False,
        interval=interval or iters + 1,
        save_last=interval is not None)
    cfg.default_hooks.logger = dict(
        type='LoggerHook', interval=max(1, iters // 4))
    cfg.randomness = dict(
        seed=0, deterministic=opts.get('deterministic', False))
    cfg.env_cfg.cudnn_benchmark = opts.get('cudnn_benchmark', False)
    amp = opts.get('amp', False)
    if amp and args.device == 'cuda':  # what tools/train.py --amp sets
        wrapper.update(type='AmpOptimWrapper', loss_scale='dynamic')
    elif amp or opts.get('bf16') or (args.device == 'cpu' and
                                     wrapper.get('type') == 'AmpOptimWrapper'):
        wrapper.pop('loss_scale', None)  # (AMP needs a GPU)
        wrapper.type = 'mocoplug.BF16OptimWrapper'
    if 'lr' in opts:
        wrapper.optimizer.lr = opts['lr']
    if opts.get('resume_from'):
        cfg.resume, cfg.load_from = True, opts['resume_from']
    return cfg


@contextlib.contextmanager
def kept_torch_flags():
    """Restore the process-wide torch settings mmengine's Runner sets."""
    cudnn = torch.backends.cudnn
    flags = (torch.are_deterministic_algorithms_enabled(), cudnn.deterministic,
             cudnn.benchmark)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(flags[0])
        cudnn.deterministic, cudnn.benchmark = flags[1:]
        gc.collect()


def train_runner(args, size: dict, work_dir: str, iters: int, **opts) -> dict:
    """Train ``pretrain_cfg(...)``: its figures, per-iteration ``losses``."""
    from mmengine.registry import RUNNERS
    cfg = pretrain_cfg(args, size, work_dir, iters, **opts)
    if args.device == 'cuda':
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with kept_torch_flags():
        runner = RUNNERS.build(cfg)
        runner.train()
        hub, iterations = runner.message_hub, runner.iter
        del runner
    seconds = time.perf_counter() - start
    losses, times, data_times = ([
        float(v) for v in hub.get_scalar(f'train/{k}').data[0]
    ] for k in ('loss', 'time', 'data_time'))
    if args.device == 'cuda':
        peak_mib = torch.cuda.max_memory_allocated() / 2**20
    else:
        import resource
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    window = max(1, len(losses) // 5)
    warm = len(times) // 10 + 1  # the warm-up steps, left out
    steady = statistics.median(times[warm:] or times)
    return dict(
        iterations=iterations,
        loss_first=round(statistics.mean(losses[:window]), 4),
        loss_last=round(statistics.mean(losses[-window:]), 4),
        loss_finite=all(math.isfinite(v) for v in losses),
        losses=losses,
        images_per_s=round(cfg.train_dataloader.batch_size / steady, 1),
        data_wait_share=round(
            statistics.median(data_times[warm:] or data_times) / steady, 3),
        seconds=round(seconds, 1),
        peak_memory_mib=round(peak_mib),
        memory_kind='CUDA max_memory_allocated'
        if args.device == 'cuda' else 'process peak RSS')


def checkpoint_tensors(path: str) -> dict:
    """Every tensor of a checkpoint's model and optimizer state."""
    ckpt = torch.load(path, map_location='cpu', weights_only=False)
    out = {f'model/{k}': v for k, v in ckpt['state_dict'].items()}
    for pid, state in ckpt['optimizer']['state'].items():
        out.update((f'optimizer/{pid}/{name}', value)
                   for name, value in state.items() if torch.is_tensor(value))
    return out


def benchmark_command(name: str):
    """The module of a sub-command of tools/benchmarks/benchmark.py."""
    if osp.join(ROOT, 'tools') not in sys.path:  # last: see benchmark.py
        sys.path.append(osp.join(ROOT, 'tools'))
    from benchmarks.benchmark import command_module
    return command_module(name)


def environment(args) -> dict:
    """Versions, the mmcv ops (True: compiled) and the GPU."""
    from mocoplug.compat.mmcv_ops import serve_mmcv_ops
    env = dict(
        python=platform.python_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cpu_count=os.cpu_count(),
        mmcv_ops=serve_mmcv_ops() is None)
    env.update((n, __import__(n).__version__)  # (mocoplug imports them)
               for n in ('mmengine', 'mmcv', 'mmpretrain', 'mocoplug'))
    if args.device == 'cuda':
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cudnn=torch.backends.cudnn.version())
    return env


def run_step(name: str, args, size, work_dir) -> dict:
    """Run the step ``run_{name}`` in its folder; its status and time."""
    print(f'\n=== {name} ===', flush=True)
    start = time.perf_counter()
    step_dir = osp.join(work_dir, name)
    os.makedirs(step_dir, exist_ok=True)
    try:
        result = globals()[f'run_{name}'](args, size, step_dir)
        failed = [k for k, ok in result.get('checks', {}).items() if not ok]
        result.update(
            status='failed' if failed else 'ok', failed_checks=failed)
    except Exception:  # noqa: BLE001  (the report says what broke)
        error = traceback.format_exc()[-4000:]
        print(error, flush=True)
        last = error.strip().splitlines()[-1][:100]
        result = dict(status='error', error=error, figures=last)
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
    for name in args.steps:
        report['steps'][name] = run_step(name, args, size, work_dir)
        report['ok'] = all(s['status'] == 'ok'
                           for s in report['steps'].values())
        mmengine.dump(report, args.out, 'json', indent=1, default=str)
    print_table(report)
    print(f'wrote {args.out}')
    return report


def print_table(report: dict) -> None:
    """One line per step: status, seconds, its figures."""
    env = report['environment']
    print(f"\ngpu_check ({report['mode']}); torch {env['torch']}, "
          f"{env.get('gpu', 'no GPU')}")
    print('| step | status | seconds | figures |\n|---|---|---|---|')
    for name, step in report['steps'].items():
        failed = ', '.join(step.get('failed_checks', []))
        status = step['status'] + (f' ({failed})' if failed else '')
        print(f"| {name} | {status} | {step['step_seconds']} | "
              f"{step.get('figures', '')} |")
    print(f"all ok: {report['ok']}")


if __name__ == '__main__':
    result = main()
    sys.exit(0 if result is None or result['ok'] else 1)
