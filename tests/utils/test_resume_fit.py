# Copyright (c) mocoplug contributors. All rights reserved.
"""The resume check's comparison, against torch's own loader."""
import copy
import inspect

import pytest
import torch
import torch.nn as nn
from mmengine.runner import Runner

from mocoplug.registry import MODEL_WRAPPERS
from mocoplug.utils.resume_fit import (MAX_LISTED, RESUME_REVISE_KEYS,
                                       ResumeMismatchError, check_resume_fits,
                                       compare_state_dict)
from ..models.data_preprocessors.test_device_augment_data_preprocessor import (
    batch, build, run)


@MODEL_WRAPPERS.register_module(force=True)
class WrapperForTest(nn.Module):
    """Stands for DDP: the model under ``.module`` (mmengine's
    is_model_wrapper knows it from the registry)."""

    def __init__(self, module):
        super().__init__()
        self.module = module


def small_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 4))


def torch_reports(model, state_dict):
    """What torch's load_state_dict(strict=False) finds: missing,
    unexpected, and the names in its size-mismatch errors."""
    model = copy.deepcopy(model)
    try:
        result = model.load_state_dict(state_dict, strict=False)
    except RuntimeError as error:
        text = str(error)
        shapes = sorted(name for name in model.state_dict()
                        if f'size mismatch for {name}:' in text)
        # the keys are only known without a size error: load the rest
        fitting = {k: v for k, v in state_dict.items() if k not in shapes}
        result = model.load_state_dict(fitting, strict=False)
        missing = [k for k in result.missing_keys if k not in shapes]
        return shapes, missing, result.unexpected_keys
    return [], result.missing_keys, result.unexpected_keys


def test_its_own_state_fits_bare_prefixed_and_wrapped():
    model = small_model()
    state = model.state_dict()
    check_resume_fits(model, dict(state_dict=state, meta={}))
    check_resume_fits(model, state)  # no 'state_dict' key: mmengine's rule
    # a DDP model's state (keys 'module.'...) and a wrapped model to resume
    prefixed = {f'module.{k}': v for k, v in state.items()}
    check_resume_fits(WrapperForTest(model), dict(state_dict=prefixed))
    assert not compare_state_dict(model, state)


def test_revise_keys_are_those_runner_resume_uses():
    default = inspect.signature(
        Runner.load_checkpoint).parameters['revise_keys'].default
    assert list(RESUME_REVISE_KEYS) == default


def test_every_kind_of_mismatch_agrees_with_torch_and_is_listed():
    model = small_model()
    state = dict(model.state_dict())
    state['0.weight'] = torch.zeros(5, 2)  # model: (3, 2)
    state['2.bias'] = torch.zeros(3)  # model: (4, )
    del state['1.running_var']
    del state['1.num_batches_tracked']  # not reported (mmengine's rule)
    state['3.weight'] = torch.zeros(1)
    mismatch = compare_state_dict(model, state)
    assert mismatch.shapes == [('0.weight', (5, 2), (3, 2)),
                               ('2.bias', (3, ), (4, ))]
    assert mismatch.missing == ['1.running_var']
    assert mismatch.unexpected == ['3.weight']
    shapes, missing, unexpected = torch_reports(model, state)
    assert shapes == ['0.weight', '2.bias']
    # (torch keeps the model's num_batches_tracked for a state without
    # BatchNorm's version metadata, as this one)
    assert missing == ['1.running_var']
    assert unexpected == ['3.weight']

    with pytest.raises(ResumeMismatchError) as error:
        check_resume_fits(model, dict(state_dict=state))
    listing = '\n'.join([
        '  another shape (checkpoint vs model) (2):',
        '    0.weight: [5, 2] vs [3, 2]',
        '    2.bias: [3] vs [4]',
        '  missing from the checkpoint (1):',
        '    1.running_var',
        '  in the checkpoint but not in the model (1):',
        '    3.weight',
    ])
    message = str(error.value)
    assert message.startswith('Cannot resume: the checkpoint\'s model state '
                              'does not fit this model')
    assert f':\n{listing}\nResume with the config the checkpoint was ' \
           'written with' in message
    assert "another model's backbone pretrained=CHECKPOINT" in message
    assert 'model.encoders_from=CHECKPOINT' in message


def test_long_lists_are_cut_with_a_count():
    model = small_model()
    state = dict(model.state_dict())
    for i in range(MAX_LISTED + 5):
        state[f'extra.{i:02d}'] = torch.zeros(1)
    with pytest.raises(ResumeMismatchError) as error:
        check_resume_fits(model, dict(state_dict=state))
    message = str(error.value)
    assert f'in the checkpoint but not in the model ({MAX_LISTED + 5}):' \
        in message
    assert f'extra.{MAX_LISTED - 1:02d}\n    ... and 5 more\n' in message
    assert f'extra.{MAX_LISTED:02d}' not in message


def test_a_generator_state_of_another_device_is_not_refused():
    """The device augmentation's generator state is 16 bytes on CUDA and
    5056 on the CPU: a CUDA run's checkpoint resumed on the CPU fits, and
    loading it re-seeds the generator from the saved state."""
    model = nn.ModuleDict(dict(data_preprocessor=build()))
    outputs = []
    for seed in (0, 0, 1):
        state = dict(model.state_dict())
        cuda_state = torch.randint(
            0,
            256, (16, ),
            generator=torch.Generator().manual_seed(seed),
            dtype=torch.uint8)
        state['data_preprocessor.generator_state'] = cuda_state
        check_resume_fits(model, dict(state_dict=state))
        resumed = copy.deepcopy(model)
        resumed.load_state_dict(state)
        outputs.append(run(resumed.data_preprocessor, batch()))
    assert all(torch.equal(x, y) for x, y in zip(outputs[0], outputs[1]))
    assert not all(torch.equal(x, y) for x, y in zip(outputs[0], outputs[2]))
