# Copyright (c) mocoplug contributors. All rights reserved.
"""The wheel ships configs/ and tools/ under mocoplug/.mim, as mmpretrain
does, so that mim and `mocoplug::dir/config.py` bases find them."""
import os
import shutil
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = shutil.ignore_patterns('.git', '.venv', 'work_dirs', '.mim',
                              '__pycache__', '*.egg-info', 'build', 'dist')


def test_wheel_ships_configs_and_tools_and_resolves_mocoplug_bases(tmp_path):
    src = tmp_path / 'src'
    shutil.copytree(ROOT, src, ignore=SKIP)  # the checkout stays untouched
    subprocess.run([
        sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps',
        '--no-build-isolation', '-w',
        str(tmp_path / 'whl'),
        str(src)
    ],
                   check=True)
    wheel = next((tmp_path / 'whl').glob('mocoplug-*.whl'))
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ('mocoplug/.mim/model-index.yml',
                 'mocoplug/.mim/configs/mocov2_r50_8xb32.py',
                 'mocoplug/.mim/configs/mocov2/metafile.yml',
                 'mocoplug/.mim/configs/_base_/default_runtime.py',
                 'mocoplug/.mim/configs/_base_/datasets/'
                 'imagenet_bs32_mocov2.py',
                 'mocoplug/.mim/configs/benchmarks/knn_r50_in1k.py',
                 'mocoplug/.mim/tools/train.py',
                 'mocoplug/.mim/tools/dist_train.sh',
                 'mocoplug_site/__init__.py', 'mocoplug_site/mmcv_ext.py'):
        assert name in names, name
    # no test package at the top of site-packages (find_packages excluded
    # `tests` but not `tests.*`: 117 entries)
    assert not [n for n in names if n.startswith(('tests/', 'tools/'))]
    # the start-up hook at the wheel's root, i.e. in site-packages
    pth = zipfile.ZipFile(wheel).read('mocoplug-site.pth').decode()
    assert ".install()" in pth and 'sitedir' in pth
    assert_mmcv_is_an_extra(wheel)
    site = tmp_path / 'site'
    subprocess.run([
        sys.executable, '-m', 'pip', 'install', '-q', '--no-deps', '--target',
        str(site),
        str(wheel)
    ],
                   check=True)
    script = (
        'import sys; sys.path.insert(0, sys.argv[1])\n'
        'import mocoplug\n'
        'assert mocoplug.__file__.startswith(sys.argv[1]), mocoplug.__file__\n'
        'from mmengine.config import Config\n'
        'cfg = Config.fromstring("_base_ = \'mocoplug::benchmarks/'
        'linear_r50_8xb32-steplr-100e_in1k.py\'\\n'
        'model = dict(head=dict(num_classes=10))", ".py")\n'
        'assert cfg.model.head.num_classes == 10\n'
        'assert cfg.optim_wrapper.optimizer.lr == 30.\n'
        # a pretraining config through its nested `../_base_/...` bases
        'cfg = Config.fromstring("_base_ = \'mocoplug::mocov2/'
        'mocov2_r50_8xb32-coslr-200e_in1k.py\'", ".py")\n'
        'assert cfg.model.queue.size == 65536\n'
        'assert cfg.view_pipeline[-2].type == "mocoplug.FastGaussianBlur"\n'
        'print("ok")\n')
    out = subprocess.run(
        [sys.executable, '-c', script, str(site)],
        capture_output=True,
        text=True,
        check=True)
    assert out.stdout.strip().endswith('ok')
    assert_the_hook_runs_only_its_own_package(site, tmp_path / 'cwd')


def assert_the_hook_runs_only_its_own_package(site, cwd) -> None:
    """The .pth loads mocoplug_site from its own folder: a mocoplug_site/
    in the current folder (reached with PYTHONPATH ending in ':', as
    mmdet's dist_train.sh makes it) was imported at every start-up."""
    (cwd / 'mocoplug_site').mkdir(parents=True)
    (cwd / 'mocoplug_site' / '__init__.py').write_text(
        "open('ran', 'w').write('the current folder\\'s package ran')\n"
        'def install(): pass\n')
    script = ('import site, sys; site.addsitedir(sys.argv[1])\n'
              'hook = sys.modules["mocoplug_site"]\n'
              'assert hook.__file__.startswith(sys.argv[1]), hook.__file__\n'
              'assert any(type(f).__name__ == "SiteFinder" '
              'for f in sys.meta_path)\n')
    env = dict(os.environ, PYTHONPATH=':')  # -S: only this site folder
    subprocess.run([sys.executable, '-S', '-c', script,
                    str(site)],
                   cwd=cwd,
                   env=env,
                   check=True)
    assert not (cwd / 'ran').exists()


def assert_mmcv_is_an_extra(wheel) -> None:
    """mmcv comes as mmcv-lite or as mmcv with compiled ops, both imported
    as `mmcv`; pip cannot require
    one of two, so neither is unconditional (as in mmpretrain and mmdet)
    and each is an extra with mmdet 3.3's range (mmcv < 2.2)."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(
            next(name for name in archive.namelist()
                 if name.endswith('.dist-info/METADATA'))).decode()
    requires = [
        Requirement(line.split(':', 1)[1].strip())
        for line in metadata.splitlines() if line.startswith('Requires-Dist:')
    ]
    unconditional = {r.name for r in requires if r.marker is None}
    assert {'mmengine', 'mmpretrain', 'mmdet'} <= unconditional
    assert not {'mmcv', 'mmcv-lite'} & unconditional

    def extra(name: str) -> dict:
        return {
            r.name: r.specifier
            for r in requires
            if r.marker is not None and r.marker.evaluate({'extra': name})
        }

    for name, dist in (('lite', 'mmcv-lite'), ('ops', 'mmcv')):
        specifier = extra(name)[dist]
        assert '2.1.0' in specifier and '2.2.0' not in specifier, specifier
