# Copyright (c) mocoplug contributors. All rights reserved.
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip('pycocotools')  # mmpretrain's other multimodal need

CHECK = textwrap.dedent("""
    import sys, warnings
    {first}
    from mmpretrain.utils import dependency
    import mmpretrain.models
    print('multimodal', dependency.WITH_MULTIMODAL)
""")


def run(tmp_path, first):
    """Import in a fresh interpreter that sees a transformers 5 without the
    names mmpretrain 1.2's BLIP imports: its metadata, and a package that
    shadows any transformers installed."""
    info = tmp_path / 'transformers-5.0.0.dist-info'
    info.mkdir(exist_ok=True)
    (info / 'METADATA').write_text(
        'Metadata-Version: 2.1\nName: transformers\nVersion: 5.0.0\n')
    package = tmp_path / 'transformers'
    package.mkdir(exist_ok=True)
    (package / '__init__.py').write_text("__version__ = '5.0.0'\n")
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    return subprocess.run(
        [sys.executable, '-c', CHECK.format(first=first)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300)


def test_mmpretrain_models_import_under_transformers_5(tmp_path):
    plain = run(tmp_path, '')
    # mmpretrain 1.2 on its own fails (here at its first transformers
    # import; a real transformers 5 fails later, in BLIP)
    assert plain.returncode != 0
    assert "cannot import name 'AutoConfig' from 'transformers'" in \
        plain.stderr.splitlines()[-1]
    patched = run(tmp_path, 'import mocoplug')
    assert patched.returncode == 0, patched.stderr[-3000:]
    assert 'multimodal False' in patched.stdout
    assert 'they are left out' in patched.stderr
