# Copyright (c) mocoplug contributors. All rights reserved.
"""Setup mismatches that need the dataloader or the number of GPUs, caught
in before_train: before any image is loaded."""
import pytest
import torch
from mmengine.config import Config
from mmengine.runner import Runner

import mocoplug.engine.hooks.moco_config_check_hook as check_hook
from mocoplug.datasets import DigitsDataset
from mocoplug.engine.hooks import MoCoConfigCheckHook
from mocoplug.models import MoCoV3
from mocoplug.registry import DATA_SAMPLERS, DATASETS
from ...configs.conftest import config_path

CHECK = dict(type='MoCoConfigCheckHook')


@pytest.fixture
def loaded(monkeypatch):
    """The indices of every image the dataset prepared."""
    calls = []
    original = DigitsDataset.prepare_data

    def record(self, idx):
        calls.append(idx)
        return original(self, idx)

    monkeypatch.setattr(DigitsDataset, 'prepare_data', record)
    return calls


def run(cfg):
    cfg.default_hooks.moco_config_check = CHECK
    runner = Runner.from_cfg(cfg)
    runner.train()
    return runner


def test_on_by_default_and_a_good_setup_passes(tiny_moco_runner_cfg, tmp_path,
                                               loaded):
    cfg = Config.fromfile(
        config_path(
            'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py'))
    assert cfg.default_hooks.moco_config_check == CHECK
    runner = run(tiny_moco_runner_cfg(tmp_path, max_iters=1))
    assert any(isinstance(h, MoCoConfigCheckHook) for h in runner.hooks)
    assert runner.iter == 1 and len(loaded) == 8


def test_no_momentum_update_hook_is_refused_before_training(
        tiny_moco_runner_cfg, tmp_path, loaded):
    """The key encoder would stay frozen: refused before any image is
    loaded, with the config line to add."""
    with pytest.raises(ValueError, match="type='MomentumUpdateHook'"):
        run(tiny_moco_runner_cfg(tmp_path, hooks=[]))
    assert loaded == []


def test_num_splits_larger_than_the_batch(tiny_moco_runner_cfg, tmp_path,
                                          loaded):
    cfg = tiny_moco_runner_cfg(tmp_path)
    cfg.model.num_splits = 16  # batch_size is 8
    with pytest.raises(ValueError) as err:
        run(cfg)
    assert str(err.value) == (
        "MoCo: shuffle_bn='split' normalises every batch in "
        'model.num_splits=16 slices, but train_dataloader.batch_size=8 '
        '(images per GPU/process) is smaller: set model.num_splits to at '
        'most 8 (ideally a divisor of the batch size) or raise the batch '
        'size.')
    assert loaded == []  # before any data was loaded


def test_short_last_batch_without_drop_last(tiny_moco_runner_cfg, tmp_path,
                                            loaded):
    cfg = tiny_moco_runner_cfg(tmp_path)
    cfg.model.num_splits = 4
    cfg.train_dataloader.dataset.indices = 27  # 3 batches of 8 + 3 images
    with pytest.raises(ValueError) as err:
        run(cfg)
    msg = str(err.value)
    assert 'the last batch of every pass over the data holds 3 images per ' \
        'process (27 % batch_size 8)' in msg
    assert '(model.num_splits=4)' in msg
    assert 'set train_dataloader.drop_last=True' in msg
    assert loaded == []
    # the same with drop_last: trains
    cfg = tiny_moco_runner_cfg(tmp_path / 'b', max_iters=1)
    cfg.model.num_splits = 4
    cfg.train_dataloader.dataset.indices = 27
    cfg.train_dataloader.drop_last = True
    assert run(cfg).iter == 1


def test_uneven_batch_is_a_warning(tiny_moco_runner_cfg, monkeypatch):
    logged = []
    monkeypatch.setattr(check_hook, 'print_log',
                        lambda msg, **kw: logged.append((msg, kw['level'])))
    model = type('M', (), dict(shuffle_bn='split', num_splits=3))()
    loader = torch.utils.data.DataLoader(list(range(16)), batch_size=8)
    check_hook.check_split_batch(model, loader)  # 16 % 8 == 0: no error
    assert logged == [
        ("MoCo: shuffle_bn='split' with train_dataloader.batch_size=8 and "
         'model.num_splits=3: the slices are unequal and normalised one by '
         'one (slower); a num_splits that divides the batch size avoids it.',
         30)
    ]


def exclude_cfg(tiny_moco_runner_cfg, work_dir):
    cfg = tiny_moco_runner_cfg(work_dir, max_iters=1)
    cfg.model.queue.exclude_same_instance = True
    return cfg


def test_exclude_same_instance_with_packinputs_without_sample_idx(
        tiny_moco_runner_cfg, tmp_path, loaded):
    cfg = exclude_cfg(tiny_moco_runner_cfg, tmp_path)
    cfg.train_dataloader.dataset.pipeline[-1] = dict(
        type='PackInputs', meta_keys=('img_shape', ))
    with pytest.raises(ValueError) as err:
        run(cfg)
    assert str(err.value) == (
        "model.queue.exclude_same_instance=True needs 'sample_idx' in every "
        "data sample, but the train pipeline packs meta_keys=('img_shape',):"
        " add 'sample_idx' to PackInputs' meta_keys in "
        "train_dataloader.dataset.pipeline (it is in mmpretrain's default "
        'meta_keys) or set exclude_same_instance=False.')
    assert loaded == []
    # mmpretrain's default meta_keys keep it: trains
    assert run(exclude_cfg(tiny_moco_runner_cfg, tmp_path / 'b')).iter == 1


def test_exclude_same_instance_with_a_dataset_without_indices(
        tiny_moco_runner_cfg, tmp_path, loaded):

    @DATASETS.register_module(force=True)
    class PlainDigits(torch.utils.data.Dataset):
        """A torch dataset: no BaseDataset, no sample_idx."""

        def __init__(self, **kwargs):
            self.inner = DigitsDataset(**kwargs)

        def __len__(self):
            return len(self.inner)

        def __getitem__(self, idx):
            return self.inner[idx]

    cfg = exclude_cfg(tiny_moco_runner_cfg, tmp_path)
    cfg.train_dataloader.dataset.type = 'PlainDigits'
    with pytest.raises(
            ValueError,
            match=r'train_dataloader.dataset is a '
            r'PlainDigits, not derived from mmengine.dataset.'
            r'BaseDataset: derive it from BaseDataset or set '
            r'exclude_same_instance=False'):
        run(cfg)
    assert loaded == []
    # two concatenated datasets: both number their images from 0
    cfg = exclude_cfg(tiny_moco_runner_cfg, tmp_path / 'b')
    part = cfg.train_dataloader.dataset
    cfg.train_dataloader.dataset = dict(
        type='ConcatDataset', datasets=[part, part])
    with pytest.raises(
            ValueError,
            match=r'is a ConcatDataset: each of its '
            r'datasets numbers its images from 0.*set '
            r'exclude_same_instance=False'):
        run(cfg)
    assert loaded == []
    # a RepeatDataset maps back to one dataset: fine
    cfg = exclude_cfg(tiny_moco_runner_cfg, tmp_path / 'c')
    cfg.train_dataloader.dataset = dict(
        type='RepeatDataset', dataset=part, times=2)
    assert run(cfg).iter == 1 and len(loaded) == 8


def test_mocov3_without_syncbn_on_several_gpus_warns(monkeypatch):
    logged = []
    monkeypatch.setattr(check_hook, 'print_log',
                        lambda msg, **kw: logged.append((msg, kw['level'])))
    mlp = dict(
        type='MoCoProjectionNeck',
        hid_channels=32,
        out_channels=16,
        with_bn=True,
        with_bias=False)
    backbone = dict(
        type='ResNet',
        depth=18,
        stem_channels=16,
        base_channels=16,
        out_indices=(3, ))

    def v3(norm):
        return MoCoV3(
            backbone=dict(backbone, norm_cfg=dict(type=norm)),
            neck=dict(
                mlp,
                in_channels=128,
                norm_cfg=dict(type=norm +
                              '1d') if norm == 'BN' else dict(type=norm)),
            predictor=dict(
                mlp,
                in_channels=16,
                with_avg_pool=False,
                norm_cfg=dict(type=norm +
                              '1d') if norm == 'BN' else dict(type=norm)),
            head=dict(type='InfoNCEHead', temperature=1.0))

    plain = v3('BN')
    assert check_hook.warn_without_sync_bn(plain, world_size=1) == []
    names = check_hook.warn_without_sync_bn(plain, world_size=8)
    assert names[:2] == ['backbone.bn1', 'backbone.layer1.0.bn1']
    assert len(names) == 20 + 1 + 1  # ResNet-18 + neck + predictor BNs
    msg, level = logged[0]
    assert level == 30 and msg.startswith(
        'MoCoV3 trains on 8 GPUs/processes with 22 BatchNorm layers that '
        'are not synchronised (backbone.bn1, backbone.layer1.0.bn1, '
        'backbone.layer1.0.bn2 and 19 more)')
    assert "norm_cfg=dict(type='SyncBN')" in msg and "sync_bn='torch'" in msg
    logged.clear()
    assert check_hook.warn_without_sync_bn(v3('SyncBN'), world_size=8) == []
    assert logged == []


@DATA_SAMPLERS.register_module(force=True)
class UnpaddedSampler(torch.utils.data.Sampler):
    """A sampler the hook does not know (here: every index on every
    process, neither sharded nor padded)."""

    def __init__(self, dataset, seed=None):
        self.indices = list(range(len(dataset)))

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)


@DATA_SAMPLERS.register_module(force=True)
class GroupedBatchSampler(torch.utils.data.BatchSampler):
    """A custom batch sampler (e.g. batches grouped by image shape)."""


GATHERS = ('MoCo on 2 processes gathers every process\'s batch '
           "(model.shuffle_bn='ddp', model.queue.gather=True), which needs "
           'batches of the same size on all processes at every step '
           '(unequal ones would hang NCCL)')


@pytest.fixture
def two_processes(monkeypatch):
    """The hook sees 2 processes (the run itself stays in this one)."""
    monkeypatch.setattr(check_hook, 'get_world_size', lambda: 2)


def ddp_cfg(tiny_moco_runner_cfg, work_dir):
    cfg = tiny_moco_runner_cfg(work_dir, max_iters=1)
    cfg.model.shuffle_bn = 'ddp'
    return cfg


def test_samplers_that_give_processes_unequal_batches_are_refused(
        tiny_moco_runner_cfg, tmp_path, loaded, two_processes):
    cfg = ddp_cfg(tiny_moco_runner_cfg, tmp_path)
    cfg.train_dataloader.sampler.round_up = False
    with pytest.raises(ValueError) as err:
        run(cfg)
    assert str(err.value) == (
        f"{GATHERS}, but train_dataloader.sampler.round_up=False leaves the "
        "processes' shares of different sizes: set "
        'train_dataloader.sampler.round_up=True (the default).')
    cfg = ddp_cfg(tiny_moco_runner_cfg, tmp_path / 'b')
    cfg.train_dataloader.sampler = dict(type='UnpaddedSampler')
    with pytest.raises(ValueError) as err:
        run(cfg)
    assert str(err.value) == (
        f'{GATHERS}, but train_dataloader.sampler is a UnpaddedSampler, which '
        'is not known to give every process the same number of images: use '
        "sampler=dict(type='DefaultSampler', shuffle=True) (its default "
        'round_up=True pads every share to the same size) or '
        "dict(type='InfiniteSampler') in train_dataloader.")
    cfg = ddp_cfg(tiny_moco_runner_cfg, tmp_path / 'c')
    cfg.train_dataloader.batch_sampler = dict(
        type='GroupedBatchSampler', batch_size=8, drop_last=False)
    with pytest.raises(ValueError) as err:
        run(cfg)
    assert str(err.value) == (
        f'{GATHERS}, but train_dataloader.batch_sampler is a '
        'GroupedBatchSampler, which may batch the processes differently: '
        'remove train_dataloader.batch_sampler (its batch_size and drop_last '
        'batch every process alike).')
    assert loaded == []  # all before any data was loaded


@pytest.mark.parametrize('sampler', [
    dict(type='DefaultSampler', shuffle=True),
    dict(type='InfiniteSampler', shuffle=True)
])
def test_samplers_with_equal_shares_train(tiny_moco_runner_cfg, tmp_path,
                                          loaded, two_processes, sampler):
    cfg = ddp_cfg(tiny_moco_runner_cfg, tmp_path)
    cfg.train_dataloader.sampler = sampler
    assert run(cfg).iter == 1 and len(loaded) == 8


def test_equal_batches_only_matter_when_something_is_gathered():
    # one process: any sampler
    model = type('M', (), dict(shuffle_bn='ddp', queue=None))()
    loader = torch.utils.data.DataLoader(list(range(16)), batch_size=8)
    check_hook.check_equal_batches(model, loader, world_size=1)
    # several processes, nothing gathered (split BN, a per-process queue)
    queue = type('Q', (), dict(gather=False))()
    model = type('M', (), dict(shuffle_bn='split', queue=queue))()
    check_hook.check_equal_batches(model, loader, world_size=2)
    # MoCo v3 without a queue gathers its in-batch keys
    v3 = type('MoCoV3', (), dict(queue=None))()
    with pytest.raises(
            ValueError,
            match=r"^MoCoV3 on 2 processes gathers every process's batch "
            r"\(MoCoV3's in-batch negatives \(keys of all processes\)\)"):
        check_hook.check_equal_batches(v3, loader, world_size=2)


class Queue:

    def __init__(self, size, exclude_same_instance=False):
        self.size = size
        self.exclude_same_instance = exclude_same_instance


def fake_moco(queue_size, exclude=False, encoders_from='released.pth'):
    return type(
        'M', (),
        dict(queue=Queue(queue_size, exclude), encoders_from=encoders_from))()


@pytest.fixture
def logged(monkeypatch, loaded):
    """(message, level, images loaded so far) of every check message."""
    messages = []
    monkeypatch.setattr(
        check_hook, 'print_log', lambda msg, **kw: messages.append(
            (msg, kw.get('level', 20), len(loaded))))
    return messages


def test_a_queue_with_many_keys_of_every_image_warns_before_training(
        tiny_moco_runner_cfg, tmp_path, logged):
    """A queue of 48 keys over 8 images holds 6 keys of every image (the
    rule allows 4): warned before any image is loaded; training goes on."""
    cfg = tiny_moco_runner_cfg(tmp_path, max_iters=1)
    cfg.train_dataloader.dataset.indices = 8
    runner = run(cfg)
    assert runner.iter == 1
    assert logged[:2] == [
        ('MoCo: 8 training images, 1 iterations, queue 48 (6.0 keys per '
         'image), total batch 8, 1.0 epochs of 8 images, lr 0.03, from '
         'scratch.', 20, 0),
        ('MoCo: the queue (48 keys) holds 6 keys of every one of the 8 '
         'training images, which are negatives of their own image: set '
         'model.queue.size to at most 4 x the number of images (32) or '
         'model.queue.exclude_same_instance=True.', 30, 0),
    ]
    assert len(logged) == 2


@pytest.mark.parametrize('images, exclude, warned', [(12, False, False),
                                                     (11, False, True),
                                                     (11, True, False)])
def test_queue_rule_at_most_4_keys_per_image(logged, images, exclude, warned):
    warnings = check_hook.warn_dataset_size(
        fake_moco(48, exclude), images, 1000)
    assert bool(warnings) == warned
    assert check_hook.MAX_QUEUE_KEYS_PER_IMAGE == 4


@pytest.mark.parametrize('source', [None, 'r.pth'])
def test_states_where_the_encoders_start(logged, source):
    warnings = check_hook.warn_dataset_size(
        fake_moco(16, encoders_from=source), 100, 1000,
        'total batch 64, 640.0 epochs of 100 images, lr 0.015')
    assert not warnings
    assert logged[0][0] == (
        'MoCo: 100 training images, 1000 iterations, queue 16 (0.2 keys per '
        'image), total batch 64, 640.0 epochs of 100 images, lr 0.015, ' +
        ('from scratch.' if source is None else f'encoders from {source}.'))


def test_moco_v3_with_accumulation_warns_of_its_in_batch_negatives(
        monkeypatch):
    logged = []
    monkeypatch.setattr(check_hook, 'print_log',
                        lambda msg, **kw: logged.append((msg, kw['level'])))
    v3 = type('MoCoV3', (), dict(queue=None))()
    assert not check_hook.warn_in_batch_negatives(v3, 1, 64)
    assert not check_hook.warn_in_batch_negatives(
        type('MoCo', (), dict(queue=None))(), 4, 64)
    assert check_hook.warn_in_batch_negatives(v3, 4, 64)
    (message, level), = logged
    assert level == 30 and message.startswith(
        'MoCoV3 with optim_wrapper.accumulative_counts=4: the in-batch '
        'negatives of each query are the 64 keys of its micro-batch '
        '(processes x batch), not the 256 images of an optimizer step')


def test_a_total_batch_other_than_the_recipes_is_warned(monkeypatch):
    """The detection configs are 8 x 2 (auto_scale_lr.base_batch_size 16,
    enable False): on one process of 2 images the lr stayed 0.02 without a
    word. Equal totals, or the lr scaled by auto_scale_lr, say nothing."""
    from types import SimpleNamespace

    from mmengine.optim import OptimWrapper
    from mmengine.runner import EpochBasedTrainLoop
    warnings = []
    monkeypatch.setattr(
        check_hook,
        'print_log',
        lambda msg, logger=None, level=None: warnings.append(msg))
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)

    def runner(batch, counts=1, enable=False, loop=EpochBasedTrainLoop):
        return SimpleNamespace(
            cfg=Config(
                dict(
                    auto_scale_lr=dict(enable=enable, base_batch_size=16),
                    model=dict(norm_cfg=dict(type='SyncBN')))),
            train_dataloader=SimpleNamespace(batch_size=batch),
            optim_wrapper=OptimWrapper(optimizer, accumulative_counts=counts),
            train_loop=object.__new__(loop),
            max_iters=100)

    message = check_hook.warn_recipe_batch(runner(2))
    assert warnings == [message + '.']
    for part in ('recipe for 16 images', 'takes 2 (1 process x batch 2)',
                 'the lr stays 0.02', 'lr x 0.125: pass --auto-scale-lr',
                 'SyncBN is BN over the 2 images'):
        assert part in message, part
    assert 'max_iters' not in message  # epochs: the iterations follow
    from mmengine.runner import IterBasedTrainLoop
    assert 'max_iters and the lr milestones x 8' in check_hook.\
        warn_recipe_batch(runner(2, loop=IterBasedTrainLoop))
    warnings.clear()
    for quiet in (runner(16), runner(4, counts=4), runner(2, enable=True)):
        assert check_hook.warn_recipe_batch(quiet) is None
    assert warnings == []
