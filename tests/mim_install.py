# Copyright (c) mocoplug contributors. All rights reserved.
"""Run ``mim`` (openmim) on this checkout."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def regular_install(site) -> str:
    """This checkout laid out as ``pip install .`` (not ``-e``) lays it
    out: ``site/mocoplug`` next to its dist-info. mim looks for a
    package's tools and configs under ``<dist location>/<package>/.mim``,
    which an editable install (PEP 660) does not have.
    """
    site.mkdir()
    (site / 'mocoplug').symlink_to(
        os.path.join(ROOT, 'mocoplug'), target_is_directory=True)
    info = site / 'mocoplug-0.1.0.dist-info'
    info.mkdir()
    (info / 'METADATA'
     ).write_text('Metadata-Version: 2.1\nName: mocoplug\nVersion: 0.1.0\n')
    return str(site)


def run_mim(args, site=None, timeout=900) -> subprocess.CompletedProcess:
    """``python -m mim *args``; ``site`` first on the path if given."""
    paths = [site] if site else []
    paths += [p for p in os.environ.get('PYTHONPATH', '').split(':') if p]
    env = dict(os.environ, PYTHONPATH=':'.join(paths), OMP_NUM_THREADS='1')
    return subprocess.run([sys.executable, '-m', 'mim', *args],
                          env=env,
                          capture_output=True,
                          text=True,
                          timeout=timeout)
