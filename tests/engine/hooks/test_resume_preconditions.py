# Copyright (c) mocoplug contributors. All rights reserved.
""""Bit-identical" is a checked result: each precondition of an exact
resume crossed, on the digits config of test_exact_resume_hook (8
iterations, a checkpoint at 4 or 3): bit-identical where the log says so,
the named warning where not."""
import numpy as np
import pytest
import torch

from mocoplug.registry import MODELS
from .test_exact_resume_hook import build_cfg, losses, run, tensors


@pytest.fixture
def logged(monkeypatch):
    """ExactResumeHook's messages, (level, text)."""
    import mocoplug.engine.hooks.exact_resume_hook as module
    messages = []
    monkeypatch.setattr(
        module,
        'print_log',
        lambda msg, logger=None, level=20: messages.append((level, msg)))
    return messages


def full_and_resumed(load_tool, tmp_path, edit, iter_based=False, **opts):
    """Losses and final tensors of an uninterrupted run and of one resumed
    from its middle checkpoint, ``edit(cfg)`` applied to both."""
    runs = []
    middle = 'iter_3.pth' if iter_based else 'epoch_2.pth'
    for name, resume_from in (('full', None), ('resumed',
                                               tmp_path / 'full' / middle)):
        cfg = build_cfg(
            load_tool,
            tmp_path / name,
            iter_based=iter_based,
            resume_from=resume_from,
            **dict(dict(workers=0, persistent=False), **opts))
        edit(cfg)
        runs.append(run(cfg))
    last = 'iter_8.pth' if iter_based else 'epoch_4.pth'
    a, b = (tensors(tmp_path / n / last) for n in ('full', 'resumed'))
    same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return [losses(r) for r in runs], same


def claims(logged):
    resumes = [(level, m) for level, m in logged if 'resuming at' in m]
    assert len(resumes) == 1, logged
    return resumes[0]


def accumulate(cfg):
    cfg.optim_wrapper.accumulative_counts = 2


def test_accumulation_on_a_window_boundary_is_bit_identical(
        load_tool, tmp_path, logged):
    # 2 iterations an epoch: epoch_2.pth is iteration 4, a window's end
    (full, resumed), same = full_and_resumed(load_tool, tmp_path, accumulate)
    level, message = claims(logged)
    assert level == 20 and message.endswith('the continuation is '
                                            'bit-identical')
    assert np.array_equal(full, resumed) and same


def test_accumulation_inside_a_window_is_named(load_tool, tmp_path, logged):
    # iter_3.pth: iteration 3 of windows of 2
    full_and_resumed(load_tool, tmp_path, accumulate, iter_based=True)
    level, message = claims(logged)
    assert level == 30
    assert ('iteration 3 is inside an accumulation window of '
            'optim_wrapper.accumulative_counts=2: the gradients of '
            'iterations 3-3 are not in the checkpoint') in message
    assert 'bit-identical' not in message.replace('not be bit-identical', '')


@pytest.mark.parametrize(
    'field,lost',
    [('save_optimizer', 'no optimizer state: the optimizer (SGD\'s momentum, '
      'LARS\'s or AdamW\'s moments) restarts from zero'),
     ('save_param_scheduler', 'no scheduler state: the lr schedule restarts '
      'from its first step')])
def test_a_checkpoint_without_training_state_is_named(load_tool, tmp_path,
                                                      logged, field, lost):

    def without(cfg):
        cfg.default_hooks.checkpoint[field] = False

    (full, resumed), same = full_and_resumed(load_tool, tmp_path, without)
    level, message = claims(logged)
    assert level == 30 and lost in message
    assert f'default_hooks.checkpoint.{field}=True' in message
    assert message.endswith('the continuation will not be bit-identical to '
                            'an uninterrupted run.')
    assert not same  # the warning is warranted: the runs differ


def test_iteration_loop_persistent_workers_and_the_refill(
        load_tool, tmp_path, logged):
    """encoders_from's queue refill read the loop's own persistent loader,
    shifting the uninterrupted run's batches; the resumed run (no refill)
    skipped to where no shift had been."""
    released = tmp_path / 'released.pth'

    def from_released(cfg):
        if not released.exists():
            model = MODELS.build(cfg.model)
            model.init_weights()
            torch.save(dict(state_dict=model.state_dict()), released)
        cfg.model.encoders_from = str(released)

    (full, resumed), same = full_and_resumed(
        load_tool,
        tmp_path,
        from_released,
        iter_based=True,
        workers=2,
        persistent=True)
    level, message = claims(logged)
    assert level == 20 and message.endswith('bit-identical')
    assert np.array_equal(full, resumed) and same
