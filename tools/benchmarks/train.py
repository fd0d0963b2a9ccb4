# Copyright (c) mocoplug contributors. All rights reserved.
"""Time one MoCo training step: mocoplug, mmpretrain 1.2.0's MoCo / MoCoV3
and "the floor" (only the method's math), on the same weights and batches,
taking turns (docs/user_guides/performance.md)."""
import copy
import statistics
import time
from contextlib import nullcontext
from typing import Callable, Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.logging import MessageHub, MMLogger
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmpretrain.models import selfsup as mmpretrain_selfsup
from mmpretrain.structures import DataSample

from mocoplug.engine.hooks import MomentumUpdateHook
from mocoplug.engine.optimizers import BF16OptimWrapper
from mocoplug.models import MoCo, MoCoV3
from mocoplug.models.utils.fused_info_nce import fused_info_nce
from .common import (load_average, machine, markdown_table, parser, print_rows,
                     round_robin_ms, synchronize, timed_ms, write_json)

MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]
PREPROCESSOR = dict(mean=MEAN, std=STD, to_rgb=True)
FEAT_DIM = dict(resnet18=512, resnet34=512, resnet50=2048, resnet101=2048)
RATIOS = [('ours', 'mmpretrain'), ('ours', 'floor'),
          ('ours_compiled', 'floor'), ('ours_compiled', 'floor_compiled'),
          ('ours_compiled', 'mmpretrain_compiled')]
ALGOS = ['mocov2', 'mocov3']
SEED = 0
OPTIMIZER_NOTE = dict(
    shipped='as shipped (ours and floor fused, mmpretrain torch default)',
    fused='fused for all three',
    default='torch default for all three')


def parse_args(argv=None):
    p = parser(
        __doc__,
        'train',
        out='--json',
        img_size=64,
        batch=32,
        steps=10,  # timed steps per implementation
        warmup=3,
        v3_hidden=4096,  # hidden width of the MoCo v3 MLPs
        threads=None)  # torch.set_num_threads (CPU)
    p.add_argument('--backbone', default='resnet18', choices=FEAT_DIM)
    p.add_argument('--queue-size', type=int, nargs='+', default=[4096, 65536])
    p.add_argument('--amp', choices=['on', 'off', 'bf16'], default='off')
    p.add_argument('--channels-last', choices=['on', 'off'], default='off')
    p.add_argument('--algos', nargs='+', choices=ALGOS, default=ALGOS[:1])
    p.add_argument('--optimizer', choices=OPTIMIZER_NOTE, default='shipped')
    p.add_argument('--breakdown', choices=['on', 'off'], default='on')
    p.add_argument('--compile', default=None, help="torch.compile's mode")
    p.add_argument('--compile-backend', default='inductor')
    return p.parse_args(argv)


def build_models(args, algo: str, size: Optional[int]):
    """Ours, mmpretrain's and the floor's MoCo v2 (queue ``size``) or v3
    (ResNet recipe) with the same weights and queue; the momentum."""
    feat, v3 = FEAT_DIM[args.backbone], algo == 'mocov3'
    resnet = dict(
        type='ResNet', depth=int(args.backbone[6:]), out_indices=(3, ))

    def mlp(ours, in_channels, last_bn, avg_pool):
        extra = dict(type='MoCoProjectionNeck', with_bn=True) if ours else \
            dict(type='NonLinearNeck', with_last_bias=False,
                 norm_cfg=dict(type='BN1d'))
        return dict(
            in_channels=in_channels,
            hid_channels=args.v3_hidden,
            out_channels=256,
            num_layers=2,
            with_bias=False,
            with_last_bn=last_bn,
            with_last_bn_affine=False,
            with_avg_pool=avg_pool,
            **extra)

    if v3:
        momentum, tau = 0.99, 1.0
        loss = dict(type='CrossEntropyLoss', loss_weight=2.0)
        ours = dict(
            neck=mlp(True, feat, True, True),
            predictor=mlp(True, 256, False, False),
            head=dict(type='InfoNCEHead', temperature=tau, loss=loss))
        theirs = dict(
            neck=mlp(False, feat, True, True),
            head=dict(
                type='MoCoV3Head',
                predictor=mlp(False, 256, False, False),
                loss=loss,
                temperature=tau),
            base_momentum=0.01)
    else:
        momentum, tau = 0.999, 0.2
        neck = dict(in_channels=feat, hid_channels=feat, out_channels=128)
        ours = dict(
            neck=dict(type='MoCoProjectionNeck', **neck),
            head=dict(type='InfoNCEHead', temperature=tau),
            queue=dict(type='NegativeKeyQueue', size=size, dim=128),
            shuffle_bn='none')
        theirs = dict(
            neck=dict(type='MoCoV2Neck', **neck),
            head=dict(
                type='ContrastiveHead',
                loss=dict(type='CrossEntropyLoss'),
                temperature=tau),
            queue_len=size,
            feat_dim=128,
            momentum=0.001)  # mmpretrain's 1 - m
    ours = (MoCoV3 if v3 else MoCo)(
        backbone=dict(resnet),
        data_preprocessor=PREPROCESSOR,
        channels_last=args.channels_last == 'on',
        **ours)
    ours.init_weights()
    theirs = (mmpretrain_selfsup.MoCoV3 if v3 else mmpretrain_selfsup.MoCo)(
        backbone=dict(resnet),
        data_preprocessor=dict(type='SelfSupDataPreprocessor', **PREPROCESSOR),
        **theirs)
    theirs.backbone.load_state_dict(ours.backbone.state_dict())
    copy_state(ours.neck, theirs.neck)
    if v3:
        copy_state(ours.predictor, theirs.head.predictor)
        floor = FloorMoCoV3(ours, args, tau, momentum)
    else:
        theirs.queue.copy_(ours.queue().t())
        floor = FloorMoCo(ours, args, tau, momentum)
    return ours, theirs, floor, momentum


def copy_state(src: nn.Module, dst: nn.Module) -> None:
    """Copy tensors in order (mmpretrain's necks name them differently)."""
    dst_state, src_state = dst.state_dict(), src.state_dict()
    assert len(dst_state) == len(src_state), (type(src), type(dst))
    for tensor, value in zip(dst_state.values(), src_state.values()):
        tensor.copy_(value)


def sgd(params, impl: str, args) -> torch.optim.Optimizer:
    """SGD with the kernel ``--optimizer`` gives ``impl``."""
    fused = impl != 'mmpretrain' if args.optimizer == 'shipped' else \
        args.optimizer == 'fused'
    params = [p for p in params if p.requires_grad]
    return torch.optim.SGD(
        params, lr=0.03, momentum=0.9, weight_decay=1e-4, fused=fused or None)


def optim_wrapper(model: nn.Module, args, impl: str) -> OptimWrapper:
    float16 = args.amp == 'on' and args.device == 'cuda'
    wrapper = OptimWrapper if args.amp == 'off' else (
        AmpOptimWrapper if float16 else BF16OptimWrapper)
    return wrapper(optimizer=sgd(model.parameters(), impl, args))


class FloorMoCo(nn.Module):
    """MoCo v2's step and nothing else (copies of ours' modules)."""

    def __init__(self, ours: MoCo, args, tau: float, momentum: float):
        super().__init__()
        self.backbone = copy.deepcopy(ours.backbone)
        self.neck = copy.deepcopy(ours.neck)
        self.predictor = copy.deepcopy(getattr(ours, 'predictor', None))
        self.key_encoder = copy.deepcopy(
            nn.Sequential(ours.backbone, ours.neck)).requires_grad_(False)
        self.tau, self.momentum = tau, momentum
        self.optimizer = sgd(self.parameters(), 'floor', args)
        self.online = [*self.backbone.parameters(), *self.neck.parameters()]
        self.target = list(self.key_encoder.parameters())
        self.amp, self.device = args.amp != 'off', args.device
        self.scaler = torch.amp.GradScaler('cuda') if (
            args.amp == 'on' and args.device == 'cuda') else None
        self.register_buffer('mean', torch.tensor(MEAN).view(1, 3, 1, 1))
        self.register_buffer('std', torch.tensor(STD).view(1, 3, 1, 1))
        if self.predictor is None:
            self.register_buffer('queue', ours.queue().clone())
            self.ptr = 0

    def autocast(self):
        """Autocast as the optim wrappers do (bfloat16 on the CPU)."""
        if not self.amp:
            return nullcontext()
        dtype = torch.float16 if self.scaler is not None else torch.bfloat16
        return torch.autocast(self.device, dtype=dtype)

    def update(self, loss: torch.Tensor) -> None:
        """Backward, optimizer step and momentum update."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        with torch.no_grad():
            torch._foreach_lerp_(self.target, self.online, 1 - self.momentum)

    def normalise(self, raw: List[torch.Tensor]) -> List[torch.Tensor]:
        """What SelfSupDataPreprocessor does: BGR -> RGB, float, normalise."""
        return [(x[:, [2, 1, 0], ...].float() - self.mean) / self.std
                for x in raw]

    def step(self, raw: List[torch.Tensor]) -> None:
        im_q, im_k = self.normalise(raw)
        with self.autocast():
            q = self.neck(self.backbone(im_q))[0]
            with torch.no_grad():
                k = self.key_encoder(im_k)[0]
        q, k = F.normalize(q.float(), dim=1), F.normalize(k.float(), dim=1)
        self.update(fused_info_nce(q, k, self.queue, self.tau)[0])
        with torch.no_grad():  # after the step, so nothing is copied
            n = k.shape[0]
            self.queue[self.ptr:self.ptr + n] = k
            self.ptr = (self.ptr + n) % self.queue.shape[0]


class FloorMoCoV3(FloorMoCo):
    """MoCo v3's step and nothing else (copies of ours' modules)."""

    def step(self, raw: List[torch.Tensor]) -> None:
        v1, v2 = self.normalise(raw)
        with self.autocast():
            q1 = self.predictor(self.neck(self.backbone(v1)))[0]
            q2 = self.predictor(self.neck(self.backbone(v2)))[0]
            with torch.no_grad():
                k1, k2 = self.key_encoder(v1)[0], self.key_encoder(v2)[0]
        labels = torch.arange(q1.shape[0], device=q1.device)

        def ctr(q, k):
            q, k = F.normalize(q.float(), dim=1), F.normalize(k.float(), dim=1)
            with torch.autocast(q.device.type, enabled=False):
                return F.cross_entropy(q @ k.t() / self.tau,
                                       labels) * (2 * self.tau)

        self.update(ctr(q1, k2) + ctr(q2, k1))


def make_batches(args, count: int = 4) -> List[List[torch.Tensor]]:
    """A few batches of two uint8 views, as a dataloader would give."""
    gen = torch.Generator().manual_seed(SEED)
    shape = (args.batch, 3, args.img_size, args.img_size)
    return [[
        torch.randint(0, 256, shape, dtype=torch.uint8,
                      generator=gen).to(args.device) for _ in range(2)
    ] for _ in range(count)]


def step_functions(args, algo: str, size: int) -> Dict[str, Callable]:
    """One training-step function (with ``.model``) per implementation."""
    torch.manual_seed(SEED)
    if algo == 'mocov3':
        MessageHub.get_current_instance().update_info('max_iters', 10**6)
    ours, theirs, floor, momentum = build_models(args, algo, size)
    channels_last = args.channels_last == 'on'
    for module in (ours, theirs, floor):
        if channels_last and module is not ours:
            module.to(memory_format=torch.channels_last)
        module.to(args.device).train()
    hook = MomentumUpdateHook(momentum=momentum)
    hook.attach(ours)
    wrappers = dict(
        ours=optim_wrapper(ours, args, 'ours'),
        mmpretrain=optim_wrapper(theirs, args, 'mmpretrain'))
    samples = [
        DataSample(metainfo=dict(sample_idx=i)) for i in range(args.batch)
    ]

    def layout(raw):  # the input conversion is part of the timed step
        if not channels_last:
            return list(raw)
        return [x.contiguous(memory_format=torch.channels_last) for x in raw]

    def run_ours(raw):
        ours.train_step(
            dict(inputs=list(raw), data_samples=samples), wrappers['ours'])
        hook.update(momentum)

    def run_theirs(raw):
        theirs.train_step(
            dict(inputs=layout(raw), data_samples=samples),
            wrappers['mmpretrain'])

    def run_floor(raw):
        floor.step(layout(raw))

    run_ours.model, run_theirs.model, run_floor.model = ours, theirs, floor
    funcs = dict(ours=run_ours, mmpretrain=run_theirs, floor=run_floor)
    return funcs, (ours, hook, wrappers['ours'], samples)


def compiled_step_functions(args, algo: str, size) -> Dict[str, Callable]:
    """step_functions' steps compiled, ``.first_ms`` their first's time."""
    funcs, _ = step_functions(args, algo, size)
    options = dict(backend=args.compile_backend, mode=args.compile)
    funcs['ours'].model.compile_encoders(**options)
    for module in funcs['floor'].model.children():  # its encoders
        module.compile(**options)
    theirs = funcs['mmpretrain'].model
    theirs.train_step = torch.compile(theirs.train_step, **options)
    batch = make_batches(args, 1)[0]
    for impl, func in funcs.items():
        try:
            func.first_ms = timed_ms(lambda: func(batch), args.device)
        except RuntimeError as error:  # reported, the others still timed
            func.first_ms = None
            print(f'{impl}_compiled failed: {str(error).splitlines()[0]}')
    return {f'{impl}_compiled': func for impl, func in funcs.items()}


def breakdown(ours_bundle, batches, args) -> Dict[str, float]:
    """Median ms of each piece of ours' MoCo v2 step, synced after each."""
    model, hook, wrapper, samples = ours_bundle
    queue, scaler = model.queue, getattr(wrapper, 'loss_scaler', None)
    pieces = {}
    for i in range(args.warmup + args.steps):
        raw = batches[i % len(batches)]
        marks = []

        def mark(name):
            synchronize(args.device)
            marks.append((name, time.perf_counter()))

        mark('start')
        data = model.data_preprocessor(
            dict(inputs=list(raw), data_samples=samples), True)
        with wrapper.optim_context(model):
            im_q, im_k = model.views(data['inputs'], 'MoCo')
            mark('preprocess')
            feat = model.neck(model.backbone(im_q))[0]
            mark('query forward')
            query = F.normalize(feat.float(), dim=1)
            key = model.encode_keys(im_k)
            mark('key forward (incl. Shuffle BN)')
            negatives = queue()  # writes the previous step's keys
            mark('queue update')
            loss, _ = model.parse_losses(model.head(query, key, negatives))
            mark('logits + loss forward')
            queue.enqueue(key)
            mark('queue update')
        if scaler is not None:
            loss = scaler.scale(loss)
        (grad, ) = torch.autograd.grad(loss, feat)
        mark('logits + loss backward')
        feat.backward(grad)
        mark('query backward')
        wrapper.step()
        wrapper.zero_grad()
        mark('optimizer')
        hook.update(hook.momentum)
        mark('momentum update')
        if i < args.warmup:
            continue
        step = {}
        for (_, t0), (name, t1) in zip(marks, marks[1:]):
            step[name] = step.get(name, 0.0) + (t1 - t0) * 1000
        for name, ms in step.items():
            pieces.setdefault(name, []).append(ms)
    return {name: statistics.median(v) for name, v in pieces.items()}


def main(argv=None):
    args = parse_args(argv)
    MMLogger.get_instance('mocoplug_benchmark', log_level='WARNING')
    if args.threads:
        torch.set_num_threads(args.threads)
    start_machine = machine(args.device)
    runs = []
    for algo in args.algos:
        for size in [None] if algo == 'mocov3' else args.queue_size:
            funcs, bundle = step_functions(args, algo, size)
            compiled = compiled_step_functions(args, algo,
                                               size) if args.compile else {}
            funcs.update((n, f) for n, f in compiled.items() if f.first_ms)
            batches = make_batches(args)
            times = round_robin_ms(funcs, args.device, args.steps, args.warmup,
                                   batches)
            run = dict(
                algo=algo,
                queue_size=size,
                steps={
                    name: dict(median_ms=statistics.median(t), all_ms=t)
                    for name, t in times.items()
                },
                first_step_ms=dict(
                    (n, f.first_ms) for n, f in compiled.items()),
                paired_ratio={
                    f'{a}/{b}':
                    statistics.median(
                        map(float.__truediv__, times[a], times[b]))
                    for a, b in RATIOS if a in times and b in times
                })
            if args.breakdown == 'on' and algo != 'mocov3':
                run['breakdown_ours_ms'] = breakdown(bundle, batches, args)
                print_breakdown(run)
            runs.append(run)
    print_table(runs, args, start_machine)
    result = dict(
        config=vars(args),
        machine=start_machine,
        load_average_end=load_average()[0],
        torch=torch.__version__,
        runs=runs)
    write_json(result, args.json)
    return result


def print_breakdown(run) -> None:
    pieces = run['breakdown_ours_ms']
    total = sum(pieces.values())
    print(f"\nbreakdown of ours ({run['algo']}, K={run['queue_size']}), "
          'median ms with a sync after each piece (the timed step: '
          f"{run['steps']['ours']['median_ms']:.1f}):")
    print_rows({
        name: f'{ms:.2f} ({100 * ms / total:.1f}%)'
        for name, ms in dict(pieces, total=total).items()
    })


def print_table(runs, args, machine_at_start: str) -> None:
    compiled = '' if not args.compile else (
        f'; *_compiled: torch.compile(backend={args.compile_backend!r}, '
        f'mode={args.compile!r}), first step (compiling) ' +
        ', '.join(f'{n} ' + (f'{ms / 1000:.1f} s' if ms else 'failed')
                  for n, ms in runs[0]['first_step_ms'].items()))
    print(
        f'\n{machine_at_start} at start; {args.backbone}, '
        f'{args.img_size} px, batch {args.batch}, amp {args.amp}, '
        f'channels_last {args.channels_last}, median of {args.steps} steps '
        f'after {args.warmup} warm-up, round-robin, one process. Shuffle BN: '
        'none in all (single process). SGD kernel: '
        f"{OPTIMIZER_NOTE[args.optimizer]}{compiled}. Ratios: of the medians "
        '(median of the per-round ratios).')
    impls, ratios = list(runs[0]['steps']), list(runs[0]['paired_ratio'])
    columns = dict(algo='algo', K='K')
    columns.update((n, f'{n} ms/step (img/s)') for n in impls)
    columns.update((r, r.replace('/', ' / ') + ' (paired)') for r in ratios)
    rows = []
    for run in runs:
        med = {n: run['steps'][n]['median_ms'] for n in impls}
        row = dict(algo=run['algo'], K=run['queue_size'] or 'batch')
        row.update((n, f'{med[n]:.1f} ({1000 * args.batch / med[n]:.0f})')
                   for n in impls)
        for r in ratios:
            a, b = r.split('/')
            row[r] = f"{med[a] / med[b]:.3f} ({run['paired_ratio'][r]:.3f})"
        rows.append(row)
    print(markdown_table(rows, columns))
