# Copyright (c) mocoplug contributors. All rights reserved.
import os

# Threads, set before torch and numpy size their pools: OMP_NUM_THREADS if
# the caller chose (OMP_NUM_THREADS=1 must really run the suite
# single-threaded, and spawned ranks inherit the count), else 2, or under
# pytest-xdist (make test: -n auto) the cores shared among the workers. A
# worker inherits the environment of the controller, whose default it
# replaces (with it, each of 2 workers ran 2 spinning OpenMP threads on 2
# cores and the suite took twice as long); a worker's count is final, kept
# by the processes it starts.
if 'OMP_NUM_THREADS' not in os.environ or \
        os.environ.get('MOCOPLUG_TEST_THREADS') == 'default':
    _WORKERS = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    os.environ.update(
        MOCOPLUG_TEST_THREADS='worker'
        if 'PYTEST_XDIST_WORKER' in os.environ else 'default',
        OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 2) //
                                _WORKERS)) if _WORKERS > 1 else '2')

import ast  # noqa: E402
import itertools  # noqa: E402

import mmengine.config.config  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import mocoplug  # noqa: E402,F401  (registers everything)

torch.set_num_threads(int(os.environ['OMP_NUM_THREADS']))
# cuBLAS is deterministic under torch.use_deterministic_algorithms (what
# randomness.deterministic=True sets) only with this workspace setting,
# read when CUDA starts: set before any test touches the GPU.
os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
_RUN_IDS = itertools.count()
DEVICES = ('cpu', 'cuda')


def _parse_only(text: str, **kwargs):
    """mmengine's Config.pretty_text (every logged or dumped config) runs
    yapf over the text: ~2 s per detection config on a 2-core CPU, 26 of the
    59 s of the VOC transfer test. The tests keep its check that the text is
    Python (yapf raised on a syntax error; so does ast.parse) and skip the
    layout: the dumped config is the same Python."""
    ast.parse(text)
    return text, None


mmengine.config.config.FormatCode = _parse_only


def pytest_addoption(parser):
    parser.addoption(
        '--device',
        action='append',
        choices=DEVICES,
        help='device of the tests that take the `device` fixture '
        '(repeatable). Default: $MOCOPLUG_TEST_DEVICES (comma-separated) or '
        'both, cuda skipped without a GPU. tools/gpu_check.py runs '
        '`-m device --device cuda`.')


def pytest_terminal_summary(terminalreporter):
    """Say which mmcv ops this run had (tests/compat/test_mmcv_ops.py
    compares the served kernels against compiled mmcv only where it is)."""
    from mocoplug.compat.mmcv_ops import serve_mmcv_ops
    if serve_mmcv_ops() is None:
        line = ('mmcv ops: compiled mmcv._ext; the kernels mocoplug serves '
                'were compared against it and the float64 definitions')
    else:
        line = ('mmcv ops: served by torchvision (mmcv-lite); compared '
                'against the float64 definitions only (no compiled mmcv)')
    terminalreporter.write_line(line)
    if any('test_path_matrix' in getattr(report, 'nodeid', '')
           for reports in terminalreporter.stats.values()
           for report in reports):
        from tests.test_path_matrix import summary_line
        terminalreporter.write_line(summary_line())


def pytest_configure(config):
    config.addinivalue_line(
        'markers', 'device: takes the `device` fixture (set automatically)')


def _test_devices(config):
    chosen = config.getoption('--device')
    if not chosen:
        chosen = os.environ.get('MOCOPLUG_TEST_DEVICES', ','.join(DEVICES))
        chosen = [d.strip() for d in chosen.split(',') if d.strip()]
    unknown = sorted(set(chosen) - set(DEVICES))
    if unknown:
        raise pytest.UsageError(f'MOCOPLUG_TEST_DEVICES: unknown {unknown}, '
                                f'choose from {DEVICES}')
    return chosen


def pytest_generate_tests(metafunc):
    """Run every test that takes `device` (directly or through
    `on_device`) once per chosen device."""
    if 'device' in metafunc.fixturenames:
        metafunc.parametrize(
            'device', _test_devices(metafunc.config), indirect=True)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if 'device' in getattr(item, 'fixturenames', ()):
            item.add_marker(pytest.mark.device)


@pytest.fixture(autouse=True)
def _threads_kept():
    """A tool's main() may set torch's thread count (tools/demo.py: every
    core): restored after each test, or the xdist workers that ran one
    would oversubscribe the cores for the rest of the suite (OpenMP's
    spinning threads then slow every test several times)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def device(request, monkeypatch):
    """'cpu' or 'cuda' (see --device); 'cuda' is skipped, with the reason
    shown (pytest -rs), where no GPU is visible. mmengine Runners built in
    the test put the model there (they pick CUDA whenever one exists)."""
    name = request.param
    if name == 'cuda' and not torch.cuda.is_available():
        pytest.skip('no CUDA device visible: the CUDA variant runs on a GPU '
                    'machine (python tools/gpu_check.py)')
    import mmengine.runner.runner as runner_module
    monkeypatch.setattr(runner_module, 'get_device', lambda: name)
    return name


@pytest.fixture
def on_device(device):
    """`device`, made torch's default for the test: tensors made by factory
    functions (randn, zeros, tensor, ...) and modules' parameters are
    created there, so a test body written for the CPU runs unchanged on the
    GPU. (Explicit CPU generators need an explicit device; data loaders
    need the CPU default: use `device` alone for Runner tests.)"""
    torch.set_default_device(device)
    try:
        yield device
    finally:
        torch.set_default_device(None)


def unique_experiment_name(prefix: str) -> str:
    """An experiment name no other Runner of the session has. mmengine
    names a run after its config and the second it starts, and runners of
    one name share a MessageHub (and its loss history): two short runs in
    the same second would mix their logs."""
    return f'{os.path.basename(str(prefix))}-{os.getpid()}-{next(_RUN_IDS)}'


@pytest.fixture
def deterministic():
    """Deterministic kernels for the test, as randomness.deterministic=True
    sets them (torch.use_deterministic_algorithms, cuDNN): two equal
    computations then give equal bits on CUDA too, and an operation
    without a deterministic kernel raises."""
    cudnn = torch.backends.cudnn
    saved = (torch.are_deterministic_algorithms_enabled(), cudnn.deterministic,
             cudnn.benchmark)
    torch.use_deterministic_algorithms(True)
    cudnn.deterministic, cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0])
        cudnn.deterministic, cudnn.benchmark = saved[1:]


@pytest.fixture
def tiny_runner_cfg():
    """A config for an mmengine Runner training a linear model on random
    tensors: the smallest real training loop, for engine-level tests."""
    from mmengine.config import Config

    def make(work_dir, max_iters=4, **overrides):
        cfg = dict(
            model=dict(type='ToyRegressor'),
            work_dir=str(work_dir),
            train_dataloader=dict(
                dataset=dict(type='ToyTensorDataset', size=16),
                sampler=dict(type='DefaultSampler', shuffle=False),
                batch_size=4,
                collate_fn=dict(type='default_collate')),
            train_cfg=dict(by_epoch=False, max_iters=max_iters),
            optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
            param_scheduler=dict(
                type='CosineAnnealingLR', T_max=max_iters, by_epoch=False),
            default_hooks=dict(
                checkpoint=dict(
                    type='CheckpointHook', interval=2, by_epoch=False),
                logger=dict(type='LoggerHook', interval=1)),
            env_cfg=dict(dist_cfg=dict(backend='gloo')),
            log_level='WARNING',
            experiment_name=unique_experiment_name(work_dir),
            default_scope='mocoplug')
        cfg.update(overrides)
        return Config(cfg)

    return make


def _register_toys():
    """Test-only toy model and dataset for engine-level tests."""
    from mmengine.dataset import BaseDataset
    from mmengine.model import BaseModel

    from mocoplug.registry import DATASETS, MODELS

    @MODELS.register_module(force=True)
    class ToyRegressor(BaseModel):

        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, inputs, data_samples=None, mode='tensor', **meta):
            out = self.linear(inputs)
            if mode == 'loss':
                return dict(loss=(out - data_samples).pow(2).mean())
            return out

    @DATASETS.register_module(force=True)
    class ToyTensorDataset(BaseDataset):

        def __init__(self, size=16):
            self.size = size
            super().__init__(serialize_data=False)

        def load_data_list(self):
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(self.size, 2, generator=gen)
            return [
                dict(inputs=x[i], data_samples=x[i].sum(0, keepdim=True))
                for i in range(self.size)
            ]


_register_toys()


@pytest.fixture
def tiny_moco_runner_cfg():
    """Runner config: a small MoCo v2 on 32 px digits, a few iterations."""
    from mmengine.config import Config

    def make(work_dir, max_iters=3, hooks=None, **overrides):
        view = [
            dict(
                type='RandomResizedCrop', scale=32,
                crop_ratio_range=(0.5, 1.)),
            dict(type='RandomFlip', prob=0.5),
        ]
        cfg = dict(
            model=dict(
                type='MoCo',
                data_preprocessor=dict(
                    type='SelfSupDataPreprocessor',
                    mean=[127.5] * 3,
                    std=[127.5] * 3,
                    to_rgb=False),
                backbone=dict(
                    type='ResNet',
                    depth=18,
                    stem_channels=16,
                    base_channels=16,
                    out_indices=(3, )),
                neck=dict(
                    type='MoCoProjectionNeck',
                    in_channels=128,
                    hid_channels=128,
                    out_channels=32),
                head=dict(type='InfoNCEHead', temperature=0.2),
                queue=dict(type='NegativeKeyQueue', size=48, dim=32),
                shuffle_bn='split',
                num_splits=2),
            work_dir=str(work_dir),
            train_dataloader=dict(
                dataset=dict(
                    type='DigitsDataset',
                    split='train',
                    with_label=False,
                    indices=32,
                    pipeline=[
                        dict(type='MultiView', num_views=2, transforms=[view]),
                        dict(type='PackInputs')
                    ]),
                sampler=dict(type='DefaultSampler', shuffle=True),
                batch_size=8,
                num_workers=0,
                collate_fn=dict(type='default_collate')),
            train_cfg=dict(by_epoch=False, max_iters=max_iters),
            optim_wrapper=dict(
                optimizer=dict(
                    type='SGD', lr=0.03, momentum=0.9, weight_decay=1e-4)),
            custom_hooks=hooks if hooks is not None else
            [dict(type='MomentumUpdateHook', momentum=0.99)],
            default_hooks=dict(
                logger=dict(type='LoggerHook', interval=1),
                checkpoint=dict(
                    type='CheckpointHook', interval=max_iters,
                    by_epoch=False)),
            env_cfg=dict(dist_cfg=dict(backend='gloo')),
            randomness=dict(seed=0),
            log_level='WARNING',
            experiment_name=unique_experiment_name(work_dir),
            default_scope='mocoplug')
        cfg.update(overrides)
        return Config(cfg)

    return make


def _load_tool_module(name):
    """Import tools/``name``.py as a module (tools/ is not a package), e.g.
    ``'train'`` or ``'analysis_tools/plot_curves'``."""
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, 'tools', f'{name}.py')
    module_name = 'tools_' + name.replace('/', '_')
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_tool():
    """:func:`_load_tool_module`."""
    return _load_tool_module


@pytest.fixture(scope='session')
def image_folder(tmp_path_factory):
    """Real images on disk: 8 scikit-learn digits per class for classes
    0 and 1, as 64 px PNGs in one sub-folder per class (mmpretrain's
    CustomDataset layout; with_label=False just ignores the folders)."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp('images')
    digits = load_digits()
    for cls in (0, 1):
        folder = root / f'class_{cls}'
        folder.mkdir()
        for n, i in enumerate(np.flatnonzero(digits.target == cls)[:8]):
            gray = np.clip(digits.images[i] * 16, 0, 255).astype(np.uint8)
            Image.fromarray(gray).resize(
                (64, 64)).convert('RGB').save(folder / f'{n}.png')
    return str(root)
