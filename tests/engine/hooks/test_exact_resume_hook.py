# Copyright (c) mocoplug contributors. All rights reserved.
"""Exact resume: N iterations uninterrupted against N/2 + resume + N/2, on
the digits config (scaled down) built the way tools/train.py builds it."""
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

from mocoplug.registry import HOOKS
from ...conftest import unique_experiment_name

ROOT = os.path.dirname(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CONFIG = os.path.join(
    ROOT, 'configs',
    'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
DEVICE_AUGMENT_CONFIG = CONFIG.replace('.py', '_device-aug.py')
BATCH = 8
ITERS_PER_EPOCH = 2  # 16 images


@HOOKS.register_module(force=True)
class DrawRandomNumbersHook(Hook):
    """Draws from every generator after the checkpoint is written, as a
    visualisation or logging hook might: the uninterrupted run draws here,
    the resumed run never saw these points."""

    priority = 'LOWEST'

    def _draw(self):
        torch.rand(3)
        np.random.rand(3)
        random.random()

    def after_train_epoch(self, runner):
        self._draw()

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None):
        if (runner.iter + 1) % 3 == 0:
            self._draw()


DRAWS = {}


@HOOKS.register_module(force=True)
class RecordDrawsHook(Hook):
    """Draws from the torch, numpy and Python generators at each iteration,
    as augmentations do, recording the draws (``DRAWS[work_dir][iter]``)."""

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        DRAWS.setdefault(runner.work_dir,
                         {})[runner.iter] = (torch.rand(4), np.random.rand(4),
                                             random.random())


def assert_streams_restored(uninterrupted, resumed):
    """The resumed run (from iteration 2) draws at iterations 2 and 3 what
    the uninterrupted run drew, bit for bit."""
    full, after = DRAWS[str(uninterrupted)], DRAWS[str(resumed)]
    assert sorted(after) == [2, 3]
    for i, (torch_draw, numpy_draw, python_draw) in after.items():
        assert torch.equal(torch_draw, full[i][0])
        assert np.array_equal(numpy_draw, full[i][1])
        assert python_draw == full[i][2]


def build_cfg(load_tool,
              work_dir,
              workers,
              persistent,
              iter_based,
              resume_from=None,
              hook=True):
    train = load_tool('train')
    argv = [CONFIG, '--work-dir', str(work_dir)]
    if resume_from is not None:
        argv += ['--resume', str(resume_from)]
    cfg = train.merge_args(Config.fromfile(CONFIG), train.parse_args(argv))
    cfg.log_level = 'WARNING'
    cfg.experiment_name = unique_experiment_name(work_dir)
    cfg.randomness = dict(seed=0, deterministic=True)
    loader = cfg.train_dataloader
    loader.batch_size = BATCH
    loader.num_workers = workers
    loader.persistent_workers = persistent
    loader.dataset.indices = BATCH * ITERS_PER_EPOCH
    cfg.model.queue.size = 36  # not a multiple of the batch: wrap-around
    # the momentum update, and a hook that draws after each checkpoint (the
    # kNN monitor is left out for speed; it runs before the snapshot)
    assert cfg.custom_hooks[0].type == 'MomentumUpdateHook'
    cfg.custom_hooks = [
        cfg.custom_hooks[0],
        dict(type='DrawRandomNumbersHook')
    ]
    if iter_based:
        loader.sampler = dict(type='InfiniteSampler', shuffle=True)
        cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=8)
        cfg.param_scheduler = [
            dict(type='CosineAnnealingLR', T_max=8, by_epoch=False)
        ]
        cfg.default_hooks.checkpoint = dict(
            type='CheckpointHook', interval=3, by_epoch=False)
    else:
        cfg.train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=4)
        cfg.param_scheduler = [
            dict(type='CosineAnnealingLR', T_max=4, by_epoch=True)
        ]
        cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=2)
    if not hook:  # (mmengine refuses None for a non-default hook name)
        cfg.default_hooks.pop('exact_resume')
    return cfg


def run(cfg):
    runner = Runner.from_cfg(cfg)
    runner.train()
    # Persistent workers otherwise live until a later garbage collection,
    # whose shutdown then waits up to 5 s per worker in another test.
    iterator = getattr(runner.train_dataloader, '_iterator', None)
    if iterator is not None:
        iterator._shutdown_workers()
    return runner


def losses(runner):
    return runner.message_hub.get_scalar('train/loss').data[0]


def tensors(path):
    """Every tensor of a checkpoint's model and optimizer state."""
    ckpt = torch.load(path, map_location='cpu', weights_only=False)
    out = {f'model/{k}': v for k, v in ckpt['state_dict'].items()}
    for pid, state in ckpt.get('optimizer', {'state': {}})['state'].items():
        for name, value in state.items():
            if torch.is_tensor(value):
                out[f'optimizer/{pid}/{name}'] = value
    return out


def compare(load_tool, tmp_path, workers, persistent, iter_based, hook=True):
    """Train uninterrupted and resumed; return both loss histories and the
    max abs difference per tensor of the final checkpoints."""
    opts = dict(
        workers=workers,
        persistent=persistent,
        iter_based=iter_based,
        hook=hook)
    full = run(build_cfg(load_tool, tmp_path / 'full', **opts))
    if iter_based:
        middle, last = 'iter_3.pth', 'iter_8.pth'
    else:
        middle, last = 'epoch_2.pth', 'epoch_4.pth'
    resumed = run(
        build_cfg(
            load_tool,
            tmp_path / 'resumed',
            resume_from=tmp_path / 'full' / middle,
            **opts))
    a = tensors(tmp_path / 'full' / last)
    b = tensors(tmp_path / 'resumed' / last)
    assert a.keys() == b.keys()
    diffs = {
        k: (a[k].double() -
            b[k].double()).abs().max().item() if a[k].numel() else 0.0
        for k in a
    }
    equal = all(torch.equal(a[k], b[k]) for k in a)
    return losses(full), losses(resumed), diffs, equal


# A second process multiplying matrices on every core, as other jobs on a
# busy machine do (issue: a resume diverged in 2 of 5 tries beside such jobs).
LOAD = ('import torch\n'
        'torch.set_num_threads({threads})\n'
        'a = torch.randn(512, 512)\n'
        'while True:\n'
        '    a = (a @ a).tanh_()\n')


@pytest.fixture
def cpu_load():
    """Keep every core busy in another process while the test runs."""
    load = subprocess.Popen(
        [sys.executable, '-c',
         LOAD.format(threads=os.cpu_count())])
    yield load
    load.kill()
    load.wait()
    assert load.returncode is not None


@pytest.fixture(params=['per-image', 'device-augment'])
def augment(request, monkeypatch):
    """Both augmentation paths: the per-image pipeline, and the device
    path (its generator state travels in the model's state dict)."""
    if request.param == 'device-augment':
        monkeypatch.setattr(sys.modules[__name__], 'CONFIG',
                            DEVICE_AUGMENT_CONFIG)
    return request.param


@pytest.mark.parametrize(
    'workers,persistent,iter_based', [(0, False, False), (1, False, False),
                                      (2, True, False), (0, False, True),
                                      (2, True, True)],
    ids=[
        'epoch-workers0', 'epoch-workers1-loaded', 'epoch-workers2-persistent',
        'iter-midepoch-workers0', 'iter-midepoch-workers2-persistent'
    ])
def test_resume_is_bit_identical(load_tool, tmp_path, workers, persistent,
                                 iter_based, device, augment, request):
    """Equal losses and checkpoints. The ``-loaded`` case (the settings of
    the busy-machine report) runs beside a process loading every core;
    ``MOCOPLUG_RESUME_TRIES=N`` repeats its pair N times."""
    tries = 1
    if request.node.callspec.id.endswith('loaded'):
        request.getfixturevalue('cpu_load')
        tries = int(os.environ.get('MOCOPLUG_RESUME_TRIES', '1'))
    for attempt in range(tries):
        path = tmp_path / str(attempt)
        full, resumed, diffs, equal = compare(load_tool, path, workers,
                                              persistent, iter_based)
        assert np.array_equal(full, resumed), (attempt, full, resumed)
        assert max(diffs.values()) == 0, (attempt, {
            k: v
            for k, v in diffs.items() if v
        })
    n = 8 if iter_based else 4 * ITERS_PER_EPOCH
    assert len(full) == len(resumed) == n
    assert equal
    # the key encoder, the queue and its pointer are among the tensors
    assert {
        'model/queue.keys', 'model/queue.ptr',
        'model/momentum_encoder.backbone.layers.0.weight'
    } <= {k
          for k in diffs}


@pytest.fixture
def warnings_logged(monkeypatch):
    """What ExactResumeHook logs at WARNING level."""
    import mocoplug.engine.hooks.exact_resume_hook as module
    logged = []

    def record(msg, logger=None, level=20):
        if level >= 30:
            logged.append(msg)

    monkeypatch.setattr(module, 'print_log', record)
    return logged


def toy_cfg(tiny_runner_cfg, work_dir, hook=True, **overrides):
    cfg = tiny_runner_cfg(work_dir, **overrides)
    if hook:
        cfg.default_hooks.exact_resume = dict(type='ExactResumeHook')
    return cfg


def test_checkpoint_without_random_state_warns(tmp_path, tiny_runner_cfg,
                                               warnings_logged):
    run(toy_cfg(tiny_runner_cfg, tmp_path / 'old', hook=False))
    ckpt = torch.load(
        tmp_path / 'old' / 'iter_2.pth',
        map_location='cpu',
        weights_only=False)
    assert 'resume_state' not in ckpt
    run(
        toy_cfg(
            tiny_runner_cfg,
            tmp_path / 'new',
            resume=True,
            load_from=str(tmp_path / 'old' / 'iter_2.pth')))
    assert len(warnings_logged) == 1
    assert 'carries no random state' in warnings_logged[0]
    assert 'will not be bit-identical' in warnings_logged[0]


def test_mid_epoch_checkpoint_of_an_epoch_loop_warns(tmp_path, tiny_runner_cfg,
                                                     warnings_logged):
    # 16 samples, batch 4: 4 iterations per epoch; iter_6 is mid-epoch
    epoch_loop = dict(by_epoch=True, max_epochs=2)
    run(toy_cfg(tiny_runner_cfg, tmp_path / 'a', train_cfg=epoch_loop))
    ckpt = torch.load(
        tmp_path / 'a' / 'iter_6.pth', map_location='cpu', weights_only=False)
    assert ckpt['resume_state']['exact'] is False
    run(
        toy_cfg(
            tiny_runner_cfg,
            tmp_path / 'b',
            train_cfg=epoch_loop,
            resume=True,
            load_from=str(tmp_path / 'a' / 'iter_6.pth')))
    assert len(warnings_logged) == 1
    assert 'not taken at an epoch end' in warnings_logged[0]


def test_other_worker_count_warns_and_load_from_is_ignored(
        tmp_path, tiny_runner_cfg, warnings_logged):
    run(toy_cfg(tiny_runner_cfg, tmp_path / 'a'))
    ckpt = str(tmp_path / 'a' / 'iter_2.pth')
    cfg = toy_cfg(tiny_runner_cfg, tmp_path / 'b', resume=True, load_from=ckpt)
    cfg.train_dataloader.num_workers = 1
    run(cfg)
    assert len(warnings_logged) == 1
    assert 'num_workers=0, this run has 1' in warnings_logged[0]
    # load_from without resume (fine-tuning): nothing to resume, no warning
    run(toy_cfg(tiny_runner_cfg, tmp_path / 'c', load_from=ckpt))
    assert len(warnings_logged) == 1


def draw_cfg(tiny_runner_cfg, work_dir, **overrides):
    """The toy run, recording draws; a fixed seed, as the sampler's seed
    must be the checkpoint's in an iteration-based loop."""
    return toy_cfg(
        tiny_runner_cfg,
        work_dir,
        custom_hooks=[dict(type='RecordDrawsHook')],
        randomness=dict(seed=0),
        **overrides)


def test_other_thread_count_restores_the_streams_naming_it(
        tmp_path, tiny_runner_cfg, warnings_logged):
    """Another thread count rounds float sums differently: the random
    streams are restored all the same (the data order and augmentations of
    an uninterrupted run), and the warning names the setting and its fix."""
    run(draw_cfg(tiny_runner_cfg, tmp_path / 'a'))
    ckpt = str(tmp_path / 'a' / 'iter_2.pth')
    saved = torch.load(ckpt, weights_only=False)['resume_state']['kernels']
    assert saved['threads'] == torch.get_num_threads()
    assert saved['torch'] == torch.__version__
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        run(
            draw_cfg(
                tiny_runner_cfg, tmp_path / 'b', resume=True, load_from=ckpt))
    finally:
        torch.set_num_threads(threads)
    assert_streams_restored(tmp_path / 'a', tmp_path / 'b')
    assert len(warnings_logged) == 1
    assert ('resuming at epoch 0, iteration 2 with the random streams, data '
            'order and process and worker counts of the checkpoint: the data '
            'order and augmentations are an uninterrupted run\'s, but the '
            'floating-point results may differ in the last bits because the '
            f'kernel setting threads was {threads} when the checkpoint was '
            f'written and is {threads + 1} now (torch.set_num_threads / '
            'OMP_NUM_THREADS as when it was written).') in warnings_logged[0]


def test_compiled_and_eager_kernels_are_told_apart_at_resume():
    """A compiled run's kernels round unlike eager ones: ``compile`` is a
    kernel setting, recorded only when set (eager checkpoints unchanged)."""
    from mocoplug.engine.hooks.exact_resume_hook import (kernel_settings,
                                                         rounding_differences)
    eager = kernel_settings()
    compiled = kernel_settings(dict(backend='inductor', mode='max-autotune'))
    assert 'compile' not in eager and kernel_settings(False) == eager
    assert compiled == dict(eager, compile="{'mode': 'max-autotune'}")
    assert rounding_differences(compiled, compiled) == [] or 'cuda' in eager
    assert rounding_differences(eager, compiled)[0] == (
        "the kernel setting compile was None when the checkpoint was written "
        "and is \"{'mode': 'max-autotune'}\" now (compile (mmengine's, in the "
        'config) as when it was written)')
    # the defaults, however spelt, are one setting
    assert kernel_settings(True) == kernel_settings(
        dict(backend='inductor', mode='default', fullgraph=False)) == dict(
            eager, compile='True')
    for other in (dict(backend='aot_eager'), dict(dynamic=False)):
        assert kernel_settings(other) != kernel_settings(True), other


def test_a_checkpoint_without_kernel_settings_restores_the_streams(
        tmp_path, tiny_runner_cfg, warnings_logged):
    """A checkpoint of a mocoplug that did not record the kernel settings
    resumes with its random streams, told that the results may differ."""
    run(draw_cfg(tiny_runner_cfg, tmp_path / 'a'))
    ckpt = str(tmp_path / 'a' / 'iter_2.pth')
    state = torch.load(ckpt, weights_only=False)
    del state['resume_state']['kernels']
    torch.save(state, ckpt)
    run(draw_cfg(tiny_runner_cfg, tmp_path / 'b', resume=True, load_from=ckpt))
    assert_streams_restored(tmp_path / 'a', tmp_path / 'b')
    assert len(warnings_logged) == 1
    assert ('the data order and augmentations are an uninterrupted run\'s, '
            'but the floating-point results may differ in the last bits '
            'because the checkpoint records no kernel settings.'
            ) in warnings_logged[0]


def test_a_resume_claims_bit_identity_only_where_it_holds(
        tmp_path, tiny_runner_cfg, device, monkeypatch):
    """On the CPU the same settings resume bit-identically; on CUDA the
    checkpoint records the cuDNN and TF32 flags, and without deterministic
    algorithms the log says the streams are restored but not even an
    uninterrupted run repeats itself, and the fix."""
    import mocoplug.engine.hooks.exact_resume_hook as module
    logged = []
    monkeypatch.setattr(
        module,
        'print_log',
        lambda msg, logger=None, level=20: logged.append(msg))
    run(draw_cfg(tiny_runner_cfg, tmp_path / 'a'))
    ckpt = str(tmp_path / 'a' / 'iter_2.pth')
    run(draw_cfg(tiny_runner_cfg, tmp_path / 'b', resume=True, load_from=ckpt))
    assert_streams_restored(tmp_path / 'a', tmp_path / 'b')
    kernels = torch.load(ckpt, weights_only=False)['resume_state']['kernels']
    assert len(logged) == 1
    assert device == 'cpu' or 'cuda' in kernels
    if 'cuda' not in kernels:  # (CUDA initialised: settings of a GPU run)
        assert logged[0].endswith('the continuation is bit-identical')
        return
    assert {'cuda', 'allow_tf32', 'cudnn_deterministic',
            'cudnn_benchmark'} <= set(kernels)
    assert ('because deterministic algorithms are False and cudnn.benchmark '
            'is False on CUDA, where not even an uninterrupted run repeats '
            'itself (set randomness.deterministic=True, cudnn_benchmark=False '
            'in env_cfg).') in logged[0]


def test_a_cuda_resume_with_cudnn_benchmark_says_it_does_not_repeat(
        tmp_path, tiny_runner_cfg, monkeypatch):
    """The same as above with the settings of a CUDA run under
    cudnn.benchmark (on the CPU, the settings replaced)."""
    import mocoplug.engine.hooks.exact_resume_hook as module
    settings = dict(
        module.kernel_settings(), **{
            k: v
            for k, v in CUDA_SETTINGS.items() if k.startswith(('cu', 'allow'))
        })
    settings['cudnn_benchmark'] = True
    monkeypatch.setattr(module, 'kernel_settings', lambda *_: settings)
    logged = []
    monkeypatch.setattr(
        module,
        'print_log',
        lambda msg, logger=None, level=20: logged.append(msg))
    run(draw_cfg(tiny_runner_cfg, tmp_path / 'a'))
    ckpt = str(tmp_path / 'a' / 'iter_2.pth')
    run(draw_cfg(tiny_runner_cfg, tmp_path / 'b', resume=True, load_from=ckpt))
    assert_streams_restored(tmp_path / 'a', tmp_path / 'b')
    assert len(logged) == 1
    assert (
        'with the random streams, data order and process and worker '
        'counts of the checkpoint: the data order and augmentations are '
        'an uninterrupted run\'s, but the floating-point results may '
        'differ in the last bits because deterministic algorithms are '
        f'{settings["deterministic"]} and cudnn.benchmark is True on CUDA, '
        'where not even an uninterrupted run repeats itself (set '
        'randomness.deterministic=True, cudnn_benchmark=False in '
        'env_cfg).') in logged[0]


CUDA_SETTINGS = dict(
    torch='2.14.1+cu130',
    threads=8,
    cpu='AMD EPYC 9654',
    cpu_capability='AVX512',
    onednn_isa='ALL',
    deterministic=True,
    matmul_precision='highest',
    cuda='NVIDIA H200, CUDA 13.0, cuDNN 91300',
    allow_tf32='matmul False, cudnn True',
    cudnn_deterministic=True,
    cudnn_benchmark=False)


@pytest.mark.parametrize(
    'change,why',
    [(dict(), None),
     (dict(deterministic=False), 'deterministic algorithms are False and '
      'cudnn.benchmark is False on CUDA'),
     (dict(cudnn_benchmark=True), 'deterministic algorithms are True and '
      'cudnn.benchmark is True on CUDA'),
     (dict(allow_tf32='matmul True, cudnn True'), None)],
    ids=['deterministic', 'nondeterministic', 'benchmark', 'tf32'])
def test_bit_identity_on_cuda_needs_deterministic_kernels(change, why):
    """A run on CUDA repeats itself only with deterministic algorithms and
    without cudnn.benchmark; the TF32 flags are compared like the others."""
    from mocoplug.engine.hooks.exact_resume_hook import rounding_differences
    now = dict(CUDA_SETTINGS, **change)
    if why is not None:  # not even against the same settings
        assert rounding_differences(now, now) == [
            f'{why}, where not even an uninterrupted run repeats itself (set '
            'randomness.deterministic=True, cudnn_benchmark=False in env_cfg)'
        ]
        return
    assert rounding_differences(now, now) == []
    if change:
        assert rounding_differences(CUDA_SETTINGS, now) == [
            "the kernel setting allow_tf32 was 'matmul False, cudnn True' "
            "when the checkpoint was written and is 'matmul True, cudnn True' "
            'now (torch.backends.cuda.matmul.allow_tf32 and '
            'torch.backends.cudnn.allow_tf32 as when it was written)'
        ]


def test_a_seeder_named_in_the_config_gets_the_seed_and_rank(monkeypatch):
    """ReseedWorkerPerEpoch at the head of the configured pipeline (seed 0,
    rank 0 by default): the hook gives it the run's seed and this rank, so
    worker 0 of rank 0 and of rank 1 draw different streams."""
    from types import SimpleNamespace

    from mmengine.dataset import Compose
    from mmengine.runner import EpochBasedTrainLoop

    from mocoplug.datasets.transforms import (ReseedWorkerPerEpoch,
                                              reseed_worker_per_epoch)
    from mocoplug.engine.hooks import ExactResumeHook, exact_resume_hook
    monkeypatch.setattr(reseed_worker_per_epoch, 'get_worker_info',
                        lambda: SimpleNamespace(id=0))
    draws, states = [], (random.getstate(), np.random.get_state())
    for rank in (0, 1):
        monkeypatch.setattr(exact_resume_hook, 'get_rank', lambda r=rank: r)
        seeder = ReseedWorkerPerEpoch()
        loop = EpochBasedTrainLoop.__new__(EpochBasedTrainLoop)
        loop.dataloader = SimpleNamespace(
            num_workers=2, dataset=SimpleNamespace(pipeline=Compose([seeder])))
        hook = ExactResumeHook()
        hook.before_train(SimpleNamespace(train_loop=loop, seed=7))
        assert hook._seeder is seeder
        assert (seeder.seed, seeder.rank) == (7, rank)
        seeder.set_epoch(1)
        with torch.random.fork_rng():
            seeder({})
            draws.append(torch.rand(4))
    random.setstate(states[0])
    np.random.set_state(states[1])
    assert not torch.equal(draws[0], draws[1])
