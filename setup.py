# Copyright (c) mocoplug contributors. All rights reserved.
"""Packaging for mocoplug.

Like mmpretrain's setup.py, ``configs/`` and ``tools/`` are shipped inside the
package under ``mocoplug/.mim`` so that ``mim`` and mmengine's
``mocoplug::path/to/config.py`` look-ups find them after a non-editable
install (an editable install links them instead of copying).
"""
import os
import os.path as osp
import shutil
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

ROOT = osp.dirname(osp.abspath(__file__))
MIM_FILES = ['configs', 'tools', 'model-index.yml']


def get_version() -> str:
    scope: dict = {}
    with open(osp.join(ROOT, 'mocoplug', 'version.py')) as f:
        exec(compile(f.read(), 'version.py', 'exec'), scope)
    return scope['__version__']


def parse_requirements(fname: str) -> list:
    """Read requirement lines, skipping comments and blank lines."""
    reqs = []
    with open(osp.join(ROOT, fname)) as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if line:
                reqs.append(line)
    return reqs


def add_mim_extension() -> None:
    """Place configs/, tools/ and model-index.yml under mocoplug/.mim.

    Develop (editable) installs symlink them so edits show up at once; other
    builds copy them so they end up inside the wheel.
    """
    if 'develop' in sys.argv or 'editable_wheel' in sys.argv:
        mode = 'symlink'
    elif any(
            cmd in sys.argv
            for cmd in ('sdist', 'bdist_wheel', 'build', 'install')):
        mode = 'copy'
    else:
        return
    mim_path = osp.join(ROOT, 'mocoplug', '.mim')
    os.makedirs(mim_path, exist_ok=True)
    for name in MIM_FILES:
        src = osp.join(ROOT, name)
        dst = osp.join(mim_path, name)
        if osp.islink(dst) or osp.isfile(dst):
            os.remove(dst)
        elif osp.isdir(dst):
            shutil.rmtree(dst)
        if mode == 'symlink':
            os.symlink(osp.relpath(src, mim_path), dst)
        elif osp.isdir(src):
            shutil.copytree(
                src,
                dst,
                ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
        else:
            shutil.copyfile(src, dst)


# Run by Python's `site` at every start-up of this environment: the import
# hook of mocoplug_site (serves mmcv._ext for mmcv-lite, mmengine's
# checkpoint loading under torch >= 2.6; mocoplug_site/__init__.py), loaded
# from the .pth's own folder (`sitedir`, site.addpackage's) or the editable
# install's source, never by a search of sys.path (which may hold the
# current folder).
PTH_NAME = 'mocoplug-site.pth'
PTH_LINE = ('import importlib.util as _mu, os.path as _mp, sys as _ms; '
            "_mf = _mp.join({folder}, 'mocoplug_site', '__init__.py'); "
            "_mk = _mp.isfile(_mf) and 'mocoplug_site' not in _ms.modules and "
            "_mu.spec_from_file_location('mocoplug_site', _mf); "
            "_mk and (_ms.modules.__setitem__('mocoplug_site', "
            '_mu.module_from_spec(_mk)) or _mk.loader.exec_module('
            "_ms.modules['mocoplug_site']) or _ms.modules['mocoplug_site']"
            '.install())\n')


def write_pth(folder: str, source: str = 'sitedir') -> None:
    with open(osp.join(folder, PTH_NAME), 'w') as f:
        f.write(PTH_LINE.format(folder=source))


class BuildPyWithPth(build_py):
    """Puts the .pth file at the root of the wheel (site-packages)."""

    def run(self) -> None:
        super().run()
        write_pth(self.build_lib)


class EditableWheelWithPth(editable_wheel):
    """The same for `pip install -e`: the unpacked editable wheel's root is
    the only folder setuptools copies to site-packages as it is."""

    def _install_namespaces(self, installation_dir, pth_prefix) -> None:
        super()._install_namespaces(installation_dir, pth_prefix)
        write_pth(installation_dir, repr(ROOT))


if __name__ == '__main__':
    add_mim_extension()
    setup(
        name='mocoplug',
        version=get_version(),
        description='MoCo v1/v2/v3 self-supervised pretraining for the '
        'OpenMMLab ecosystem, with detection transfer',
        long_description=open(osp.join(ROOT, 'README.md')).read()
        if osp.exists(osp.join(ROOT, 'README.md')) else '',
        long_description_content_type='text/markdown',
        author='mocoplug contributors',
        license='Apache License 2.0',
        python_requires='>=3.9',
        packages=find_packages(
            exclude=('configs*', 'tools*', 'tests', 'tests.*', 'demo*')),
        cmdclass=dict(
            build_py=BuildPyWithPth, editable_wheel=EditableWheelWithPth),
        include_package_data=True,
        package_data={
            'mocoplug': [
                '.mim/model-index.yml', '.mim/configs/**/*.py',
                '.mim/configs/*/metafile.yml', '.mim/configs/*/README.md',
                '.mim/tools/*.py', '.mim/tools/*/*.py', '.mim/tools/*.sh'
            ]
        },
        install_requires=parse_requirements('requirements/runtime.txt'),
        # mmcv is one of two distributions (see requirements/runtime.txt)
        extras_require={
            'tests': parse_requirements('requirements/tests.txt'),
            'lite': parse_requirements('requirements/lite.txt'),
            'ops': parse_requirements('requirements/ops.txt'),
        },
        classifiers=[
            'Programming Language :: Python :: 3',
            'Programming Language :: Python :: 3.11',
            'Topic :: Scientific/Engineering :: Artificial Intelligence',
        ],
        zip_safe=False,
    )
