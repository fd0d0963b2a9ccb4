# Copyright (c) mocoplug contributors. All rights reserved.
"""What the tested stack needs from mocoplug in every Python process of the
environment, whether or not it imports mocoplug (mmdet's and mmpretrain's
own tools, a user's script, ``torchrun`` and data-loader workers):

1. mmcv-lite has no ``mmcv._ext``: where no compiled one is found, the
   import resolves to :class:`~mocoplug_site.mmcv_ext.ServedOps`, the
   kernels mmdet's model zoo calls served by torchvision and torch. A
   compiled mmcv is used untouched.
2. mmengine 0.10.7 cannot load its own checkpoints under torch >= 2.6:
   when ``mmengine.runner.checkpoint`` is imported, its local loader is
   replaced (:mod:`mocoplug_site.checkpoint`).

Installing mocoplug installs ``mocoplug-site.pth``, which Python's ``site``
runs at start-up: it calls :func:`install`, which puts :class:`SiteFinder`
first in ``sys.meta_path`` (this module imports the standard library only;
the two modules above load when mmcv or mmengine asks). ``import mocoplug``
applies both as well, for a process started without the ``.pth`` (a source
checkout on ``PYTHONPATH``). ``MOCOPLUG_SITE_HOOK=0`` switches the start-up
hook off: processes that do not import mocoplug then meet mmcv-lite and
mmengine as they are. A top-level package, not part of ``mocoplug``:
it acts while mmcv and mmengine import themselves, where importing mocoplug
(which imports both) would be circular.
"""
import importlib.machinery
import os
import sys

EXT = 'mmcv._ext'
CHECKPOINT = 'mmengine.runner.checkpoint'
SWITCH = 'MOCOPLUG_SITE_HOOK'


class _ServedLoader:

    def create_module(self, spec):
        from .mmcv_ext import ServedOps
        return ServedOps('mmcv-lite: no compiled mmcv._ext found')

    def exec_module(self, module) -> None:
        pass


class _PatchAfterLoading:
    """Runs the module's own loader, then patches the module."""

    def __init__(self, loader, patch) -> None:
        self.loader = loader
        self.patch = patch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        self.patch()

    def __getattr__(self, name: str):  # get_source, get_filename, ...
        return getattr(self.loader, name)


def _patch_checkpoint_loader() -> None:
    from .checkpoint import register_checkpoint_loader
    register_checkpoint_loader()


class SiteFinder:
    """First in ``sys.meta_path``; acts on ``mmcv._ext`` and
    ``mmengine.runner.checkpoint`` only, by asking the finders after it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in (EXT, CHECKPOINT):
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, 'find_spec'):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        if fullname == EXT:
            if spec is None:
                spec = importlib.machinery.ModuleSpec(EXT, _ServedLoader())
            return spec
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchAfterLoading(spec.loader,
                                             _patch_checkpoint_loader)
        return spec


def install() -> None:
    """Put :class:`SiteFinder` first in ``sys.meta_path`` (idempotent;
    nothing when ``MOCOPLUG_SITE_HOOK`` is 0/false/no/off). Called by
    ``mocoplug-site.pth`` at start-up."""
    if os.environ.get(SWITCH,
                      '1').strip().lower() in ('0', 'false', 'no', 'off'):
        return
    if not any(type(f).__name__ == 'SiteFinder' for f in sys.meta_path):
        sys.meta_path.insert(0, SiteFinder())
