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
3. mmengine's ``mmcv_full_available`` and mmcv's ``check_ops_exist`` keep
   their answer (a compiled ``mmcv._ext`` on disk), which the served
   kernels would otherwise change (:func:`compiled_mmcv_ext`).

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
# the "is mmcv compiled?" probes, which would find the served kernels
PROBES = {
    'mmengine.utils.dl_utils.misc': 'mmcv_full_available',
    'mmcv.utils.ext_loader': 'check_ops_exist',
}


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


def compiled_mmcv_ext() -> bool:
    """Whether mmcv imports and has a compiled ``mmcv._ext`` on disk (the
    served kernels are not one): mmengine's ``mmcv_full_available`` and
    mmcv's ``check_ops_exist`` answer this, as without mocoplug."""
    try:
        import mmcv
    except ImportError:
        return False
    return importlib.machinery.PathFinder.find_spec(
        EXT, list(getattr(mmcv, '__path__', []))) is not None


def _patch_probe(name: str):

    def patch() -> None:
        setattr(sys.modules[name], PROBES[name], compiled_mmcv_ext)

    return patch


class SiteFinder:
    """First in ``sys.meta_path``; acts on ``mmcv._ext``,
    ``mmengine.runner.checkpoint`` and the ``PROBES`` modules only, by
    asking the finders after it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in (EXT, CHECKPOINT) and fullname not in PROBES:
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
            spec.loader = _PatchAfterLoading(
                spec.loader, _patch_checkpoint_loader
                if fullname == CHECKPOINT else _patch_probe(fullname))
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
