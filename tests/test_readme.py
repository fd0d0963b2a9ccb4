# Copyright (c) mocoplug contributors. All rights reserved.
"""The README's two commands and its registry example stay true (every
path and command of README.md and docs/: tests/test_docs.py)."""
import os
import re
import shutil
import subprocess
import sys

import torch
from mmengine.config import Config
from mmengine.runner import Runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, 'README.md')).read()


def code_block(first_line: str) -> str:
    """The ```python block of the README that starts with `first_line`."""
    for block in re.findall(r'```python\n(.*?)```', README, re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f'no README block starts with {first_line!r}')


def test_quick_start_is_two_make_commands():
    quick = README.split('## Quick start', 1)[1].split('\n## ', 1)[0]
    commands = re.findall(r'```bash\n(.*?)```', quick, re.S)[0]
    assert [line.split('#')[0].strip()
            for line in commands.splitlines()] == ['make demo', 'make test']
    ci = open(os.path.join(ROOT, '.ci', 'run')).read()
    # CI runs the README's `make test` first, with no prebuilt mmcv (nothing
    # is compiled); the compiled-mmcv wheel serves only `make test-ops` after
    before_test = ci.split('\nmake test\n', 1)[0]
    assert before_test != ci
    assert 'PIP_FIND_LINKS' not in ci
    assert 'wheelhouse' not in before_test
    assert 'make test-ops MMCV_WHEEL=' in ci.split('\nmake test\n', 1)[1]


def make_commands(target: str) -> list:
    """The commands `make TARGET` would run (make -n prints, runs none),
    as from a fresh shell: not the flags of a `make test` running us."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ('MAKEFLAGS', 'MFLAGS', 'MAKELEVEL', 'VENV')
    }
    out = subprocess.run(['make', '-n', '-C', ROOT, target],
                         capture_output=True,
                         text=True,
                         env=env,
                         check=True)
    return [
        line for line in out.stdout.splitlines()
        if not line.startswith('make')  # make's "Entering directory" lines
    ]


def test_demo_and_test_set_up_mmcv_lite():
    """Neither of the README's commands compiles: both set up mmcv-lite
    (the detection tests run on the ops mocoplug serves); only
    `make setup-full` asks for mmcv's compiled ops."""
    assert make_commands('demo') == [
        'bash tools/setup_env.sh', '.venv/bin/python tools/demo.py'
    ]
    assert make_commands('test') == [
        'bash tools/setup_env.sh', '.venv/bin/python -m pytest -n auto tests'
    ]
    assert make_commands('setup-full') == [
        'bash tools/setup_env.sh --with-ops'
    ]


def test_registry_example_runs(tmp_path, monkeypatch, image_folder):
    configs = tmp_path / 'configs'
    shutil.copytree(os.path.join(ROOT, 'configs'), configs)
    (configs / 'my_mocov2_r18.py').write_text(
        code_block('# configs/my_mocov2_r18.py'))
    (tmp_path / 'my_queue.py').write_text(code_block('# my_queue.py'))
    monkeypatch.syspath_prepend(str(tmp_path))

    cfg = Config.fromfile(str(configs / 'my_mocov2_r18.py'))
    # only the data and the run length change, for one CPU iteration
    pipeline = cfg.train_dataloader.dataset.pipeline
    pipeline[1].transforms[0][0].scale = 32
    cfg.train_dataloader.dataset = dict(
        type='CustomDataset',
        data_root=image_folder,
        with_label=False,
        indices=8,
        pipeline=pipeline)
    cfg.train_dataloader.update(
        batch_size=8, num_workers=0, persistent_workers=False)
    cfg.train_cfg.max_epochs = 1
    cfg.model.update(shuffle_bn='split', num_splits=2)
    cfg.work_dir = str(tmp_path / 'work')
    cfg.log_level = 'WARNING'
    runner = Runner.from_cfg(cfg)
    model = runner.model
    assert type(model.queue).__name__ == 'RecentKeyQueue'
    assert model.backbone.depth == 18
    runner.train()
    # the loss saw only the newest 4096 keys: the 8 just enqueued lead
    assert model.queue().shape == (4096, 128)
    assert torch.equal(model.queue()[:8], model.queue.keys[:8].flip(0))
    sys.modules.pop('my_queue', None)
