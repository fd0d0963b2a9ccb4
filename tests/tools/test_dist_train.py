# Copyright (c) mocoplug contributors. All rights reserved.
"""tools/dist_train.sh end to end with 2 processes on CPU (gloo), typed as
README shows it in a new shell: DDP wrapping, Shuffle BN across ranks, the
gathered queue, the kNN monitor's gathered features and the checkpoint."""
import os
import subprocess
import sys

import torch

from ..gloo import free_port

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGITS = ('configs/mocov2/'
          'mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')


def checkout_after_setup(tmp_path):
    """This checkout as a user has it after `make demo`: the repository
    with its environment in .venv (here a link to the one running the
    tests)."""
    project = tmp_path / 'mocoplug'
    project.mkdir()
    for name in ('configs', 'mocoplug', 'tools'):
        (project / name).symlink_to(os.path.join(ROOT, name))
    (project / '.venv').symlink_to(sys.prefix, target_is_directory=True)
    return project


def new_shell_env(tmp_path):
    """A new shell's environment: no PYTHON, no PYTHONPATH, no activated
    environment; `python` on PATH is the interpreter without the project's
    packages (the venv's base interpreter)."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    (bin_dir / 'python').symlink_to(sys._base_executable)
    env = dict(
        HOME=os.environ.get('HOME', str(tmp_path)),
        PATH=f'{bin_dir}:/usr/bin:/bin',
        PORT=str(free_port()),
        OMP_NUM_THREADS='1')
    if 'TMPDIR' in os.environ:
        env['TMPDIR'] = os.environ['TMPDIR']
    return env


def test_two_process_training_as_typed_in_a_new_shell(tmp_path):
    project = checkout_after_setup(tmp_path)
    env = new_shell_env(tmp_path)
    work_dir = tmp_path / 'work'
    cmd = [
        'tools/dist_train.sh', DIGITS, '2', '--work-dir',
        str(work_dir), '--cfg-options', 'model.shuffle_bn=ddp',
        'train_cfg.max_epochs=1', 'train_dataloader.batch_size=16',
        'train_dataloader.dataset.indices=64',
        'custom_hooks.1.memory_dataloader.dataset.indices=40',
        'custom_hooks.1.query_dataloader.dataset.indices=20'
    ]
    result = subprocess.run(
        cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    log = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, log
    base_has_torch = subprocess.run(
        [sys._base_executable, '-c', 'import torch'],
        capture_output=True).returncode == 0
    if not base_has_torch:  # the scripts found the project's .venv
        assert f'using {project}/.venv/bin/python' in result.stderr
    ckpt = torch.load(work_dir / 'epoch_1.pth', weights_only=False)
    state = ckpt['state_dict']
    # 64 images / (2 ranks x 16) = 2 iterations; each enqueues 2 x 16 keys
    assert int(state['queue.ptr']) == 64
    assert 'momentum_encoder.backbone.layers.0.weight' in state
    log = next(work_dir.glob('*/*.log')).read_text()
    # no GPU: the runner chose gloo for the config's nccl
    assert "env_cfg.dist_cfg.backend is 'nccl'" in log or \
        "backend is 'nccl'" in result.stdout
    assert 'rank 0/2 runs on CPU with gloo' in result.stdout + log
    # the kNN monitor ran on the gathered features of both ranks
    assert 'kNN (weighted, t=0.07) at iteration 2' in log


def fake_python(bin_dir, has_packages: bool):
    """A `python` that answers the scripts' import check as told."""
    bin_dir.mkdir()
    script = bin_dir / 'python'
    script.write_text(f'#!/bin/sh\nexit {0 if has_packages else 1}\n')
    script.chmod(0o755)
    return str(bin_dir)


def find_python(tmp_path, path, venv=False, **env):
    root = tmp_path / f'project{len(list(tmp_path.glob("project*")))}'
    root.mkdir()
    if venv:
        (root / '.venv' / 'bin').mkdir(parents=True)
        (root / '.venv' / 'bin' / 'python').symlink_to(sys.executable)
    script = os.path.join(ROOT, 'tools', 'find_python.sh')
    return subprocess.run(
        ['bash', '-c', f'source {script} && find_python {root}'],
        env=dict(PATH=f'{path}:/usr/bin:/bin', **env),
        capture_output=True,
        text=True)


def test_the_python_the_scripts_run(tmp_path):
    """$PYTHON, else `python` when it has torch and mmengine, else the
    project's .venv, else a clear error."""
    with_torch = fake_python(tmp_path / 'with', True)
    without = fake_python(tmp_path / 'without', False)
    out = find_python(tmp_path, without, PYTHON='/opt/py/bin/python')
    assert out.stdout.strip() == '/opt/py/bin/python'
    out = find_python(tmp_path, with_torch, venv=True)
    assert out.stdout.strip() == 'python'  # an activated environment
    out = find_python(tmp_path, without)
    assert out.returncode == 1 and out.stdout == ''
    assert 'Run `make demo`' in out.stderr and 'set PYTHON=' in out.stderr
    out = find_python(tmp_path, without, venv=True)
    venv_python = f'{tmp_path}/project3/.venv/bin/python'
    assert out.stdout.strip() == venv_python
    assert f'using {venv_python}' in out.stderr
    out = find_python(tmp_path, without, MOCOPLUG_VENV='/opt/venv')
    assert '/opt/venv/bin/python does not exist' in out.stderr
