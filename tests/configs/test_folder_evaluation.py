# Copyright (c) mocoplug contributors. All rights reserved.
"""kNN and linear evaluation on a labelled folder of generated images, with
a tiny MoCo checkpoint made here."""
import json
import os.path as osp

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.dataset import default_collate
from mmengine.registry import RUNNERS, DefaultScope
from mmengine.runner import Runner
from PIL import Image

from mocoplug.datasets import fill_data_root
from mocoplug.engine.runner import MoCoRunner
from mocoplug.evaluation import weighted_knn_accuracy
from mocoplug.registry import DATASETS, MODELS
from ..conftest import unique_experiment_name
from ..packaged_tools import run_packaged_tool
from .conftest import config_path, shrink_crops
from .knn_margin import assert_knn_well_conditioned

KNN = 'benchmarks/knn_r50_in1k.py'
LINEAR_FOLDER = 'benchmarks/linear_r50_8xb32-steplr-100e_folder.py'
CLASSES = ('circle', 'h_stripes', 'v_stripes')
TINY_R18 = dict(depth=18, stem_channels=16, base_channels=16)


def draw(cls: str, rng: np.random.Generator) -> np.ndarray:
    """A 16 px RGB image of the class's pattern, randomly shifted, plus
    noise."""
    yy, xx = np.mgrid[:16, :16]
    shift = rng.integers(0, 4)
    if cls == 'circle':
        mask = (yy - 8)**2 + (xx - 4 - shift)**2 < 20
    elif cls == 'h_stripes':
        mask = (yy + shift) % 4 < 2
    else:
        mask = (xx + shift) % 4 < 2
    img = np.where(mask, 220, 30) + rng.integers(0, 30, (16, 16))
    return np.repeat(img[..., None], 3, axis=2).astype(np.uint8)


def write_images(folder, per_class, rng):
    for cls in CLASSES:
        (folder / cls).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(draw(cls, rng)).save(folder / cls / f'{i}.png')


@pytest.fixture(scope='module')
def split_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp('labelled')
    rng = np.random.default_rng(0)
    write_images(root / 'train', 4, rng)
    write_images(root / 'val', 2, rng)
    return root


@pytest.fixture(scope='module')
def moco_checkpoint(tmp_path_factory):
    """A real (untrained) MoCo v2 with a tiny ResNet-18, saved as training
    saves it; its key encoder differs from the query encoder."""
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mocoplug'):
        model = MODELS.build(
            dict(
                type='MoCo',
                backbone=dict(type='ResNet', out_indices=(3, ), **TINY_R18),
                neck=dict(
                    type='MoCoProjectionNeck',
                    in_channels=128,
                    hid_channels=64,
                    out_channels=16),
                head=dict(type='InfoNCEHead'),
                queue=dict(type='NegativeKeyQueue', size=32, dim=16),
                shuffle_bn='none'))
    model.init_weights()
    with torch.no_grad():
        for p in model.momentum_encoder.parameters():
            p.add_(1.)
    path = tmp_path_factory.mktemp('ckpt') / 'moco_r18.pth'
    torch.save(dict(state_dict=model.state_dict()), path)
    return str(path), model


@torch.no_grad()
def direct_features(model, folder, pipeline, preprocessor_cfg):
    """Query-encoder features of a labelled folder, computed here: the
    dataset, the preprocessing and the pooling written out."""
    with DefaultScope.overwrite_default_scope('mocoplug'):
        dataset = DATASETS.build(
            dict(
                type='CustomDataset', data_root=str(folder),
                pipeline=pipeline))
        pre = MODELS.build(dict(preprocessor_cfg, type='ClsDataPreprocessor'))
    batch = pre(default_collate([dataset[i] for i in range(len(dataset))]))
    model.backbone.eval()
    feats = model.backbone(batch['inputs'])[-1].mean((2, 3))
    labels = torch.tensor([int(s.gt_label) for s in batch['data_samples']])
    return feats, labels


def knn_cfg_file(tmp_path):
    """The shipped kNN config with the tiny backbone and 32 px crops."""
    cfg = Config.fromfile(config_path(KNN))
    cfg.model.backbone.update(TINY_R18)
    for field in ('knn_memory_dataloader', 'knn_query_dataloader'):
        cfg[field].dataset.pipeline = shrink_crops(cfg[field].dataset.pipeline,
                                                   32)
        cfg[field].num_workers = 0
    path = tmp_path / 'knn.py'
    cfg.dump(str(path))
    return str(path), cfg


def test_knn_on_train_val_folders_matches_a_direct_computation(
        split_folder, moco_checkpoint, load_tool, tmp_path):
    path, model = moco_checkpoint
    cfg_file, cfg = knn_cfg_file(tmp_path)
    results = load_tool('analysis_tools/knn_eval').main([
        cfg_file, path, '--data-root',
        str(split_folder), '--cfg-options', 'knn.topk=[1,3]'
    ])
    pipeline = cfg.knn_query_dataloader.dataset.pipeline
    bank, bank_labels = direct_features(model, split_folder / 'train',
                                        pipeline, cfg.data_preprocessor)
    query, labels = direct_features(model, split_folder / 'val', pipeline,
                                    cfg.data_preprocessor)
    assert bank.shape == (12, 128) and query.shape == (6, 128)
    expected = weighted_knn_accuracy(query, labels, bank, bank_labels, 3,
                                     (1, 3), 0.07)
    for k in (1, 3):  # no decision within round-off of a tie
        assert_knn_well_conditioned(query, bank, bank_labels, k, 0.07, 3)
    assert results == pytest.approx(expected)
    # the patterns are easy: every val image's nearest training image is
    # of its class
    assert results['top1_k1'] == 100.


def test_knn_on_class_folders_is_leave_one_out(split_folder, moco_checkpoint,
                                               load_tool, tmp_path):
    path, model = moco_checkpoint
    folder = split_folder / 'train'  # class sub-folders, no train/ val/
    cfg_file, cfg = knn_cfg_file(tmp_path)
    results = load_tool('analysis_tools/knn_eval').main([
        cfg_file, path, '--data-root',
        str(folder), '--cfg-options', 'knn.topk=[3]', 'knn.temperature=0.1'
    ])
    feats, labels = direct_features(model, folder,
                                    cfg.knn_memory_dataloader.dataset.pipeline,
                                    cfg.data_preprocessor)
    feats = F.normalize(feats, dim=1)
    assert_knn_well_conditioned(
        feats, feats, labels, 3, 0.1, 3, exclude_self=True)
    correct = 0
    for i in range(len(feats)):
        others = [j for j in range(len(feats)) if j != i]
        sims = feats[others] @ feats[i]
        votes = torch.zeros(3)
        for s, j in zip(*sims.topk(3)):
            votes[labels[others[j]]] += torch.exp(s / 0.1)
        correct += int(votes.argmax() == labels[i])
    assert results['top1_k3'] == pytest.approx(100 * correct / len(feats))


@pytest.mark.parametrize(
    'layout, error, match',
    [('loose', ValueError, 'no class sub-folders. It holds 2 images'),
     ('empty', ValueError, 'hold no images'),
     ('missing', FileNotFoundError, 'does not exist')])
def test_knn_refuses_a_folder_that_is_not_labelled(tmp_path, load_tool,
                                                   moco_checkpoint, layout,
                                                   error, match):
    root = tmp_path / 'data'
    if layout == 'loose':
        root.mkdir()
        for i in range(2):
            Image.new('RGB', (8, 8)).save(root / f'{i}.png')
    elif layout == 'empty':
        (root / 'cat').mkdir(parents=True)
        (root / 'dog').mkdir()
    else:
        (root / 'train' / 'cat').mkdir(parents=True)
        (root / 'val').mkdir()  # val has no class folders
        Image.new('RGB', (8, 8)).save(root / 'train' / 'cat' / '0.png')
        match, error = 'no class sub-folders', ValueError
    with pytest.raises(error, match=match):
        load_tool('analysis_tools/knn_eval').main(
            [config_path(KNN), moco_checkpoint[0], '--data-root',
             str(root)])


def linear_cfg(tmp_path):
    """The shipped folder config, with the tiny backbone and 32 px crops;
    data_root left for --cfg-options."""
    cfg = Config.fromfile(config_path(LINEAR_FOLDER))
    cfg.model.backbone.update(TINY_R18)
    cfg.model.head.in_channels = 128
    cfg.work_dir = str(tmp_path / 'work')
    cfg.log_level = 'WARNING'
    cfg.env_cfg = dict(dist_cfg=dict(backend='gloo'))
    cfg.train_cfg.max_epochs = 1
    for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[field].dataset.pipeline = shrink_crops(cfg[field].dataset.pipeline,
                                                   32)
        cfg[field].batch_size = 6
        cfg[field].num_workers = 0
        cfg[field].persistent_workers = False
    return cfg


def linear_cfg_file(tmp_path):
    path = tmp_path / 'linear_folder.py'
    linear_cfg(tmp_path).dump(str(path))
    return str(path)


def test_linear_folder_config_trains_on_the_folder(tmp_path, load_tool,
                                                   split_folder,
                                                   moco_checkpoint):
    path, model = moco_checkpoint
    runner = load_tool('train').main([
        linear_cfg_file(tmp_path), '--cfg-options', f'pretrained={path}',
        f'data_root={split_folder}'
    ])
    assert runner.iter == 2  # 12 training images, batch 6, one epoch
    assert runner.model.head.fc.out_features == 3  # from the class folders
    assert runner.train_dataloader.dataset.metainfo['classes'] == CLASSES
    assert len(runner.val_dataloader.dataset) == 6
    for name, tensor in runner.model.backbone.state_dict().items():
        assert torch.equal(tensor, model.backbone.state_dict()[name]), name
    # the logged val top-1 is that of the trained classifier on val/
    model = runner.model.eval()
    correct = 0
    with torch.no_grad():
        for batch in runner.val_dataloader:
            data = model.data_preprocessor(batch, False)
            logits = model.head.fc(model.extract_feat(data['inputs'])[-1])
            labels = torch.tensor(
                [int(s.gt_label) for s in data['data_samples']])
            correct += int((logits.argmax(1) == labels).sum())
            # discrete: no prediction within round-off (~1e-6 of logits
            # of size ~1) of a tie with another class
            best = logits.topk(2, dim=1).values
            assert (best[:, 0] - best[:, 1]).min() > 1e-4
    top1 = runner.message_hub.get_scalar('val/accuracy/top1').current()
    assert top1 == pytest.approx(100 * correct / 6)


def test_linear_folder_config_needs_a_data_root(tmp_path, load_tool):
    with pytest.raises(ValueError, match='data_root=/path/to/folder'):
        load_tool('train').main([linear_cfg_file(tmp_path)])


def test_fill_data_root_checks_the_splits_agree(tmp_path, split_folder):
    cfg = Config.fromfile(config_path(LINEAR_FOLDER))
    cfg.data_root = str(split_folder)
    assert fill_data_root(cfg) == 3  # train, val, test
    assert cfg.model.head.num_classes == 3
    assert cfg.val_dataloader.dataset.data_root == str(split_folder)
    # ImageNet configs (top-level data_root of their own) are untouched
    cfg = Config.fromfile(
        config_path('mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py'))
    assert fill_data_root(cfg) == 0
    # a class missing from val
    (tmp_path / 'train' / 'a').mkdir(parents=True)
    (tmp_path / 'train' / 'b').mkdir()
    (tmp_path / 'val' / 'a').mkdir(parents=True)
    for folder in ('train/a', 'train/b', 'val/a'):
        Image.new('RGB', (8, 8)).save(tmp_path / folder / '0.png')
    cfg = Config.fromfile(config_path(LINEAR_FOLDER))
    cfg.data_root = str(tmp_path)
    with pytest.raises(ValueError, match='different class folders'):
        fill_data_root(cfg)


@pytest.fixture(scope='module')
def linear_classifier(tmp_path_factory, split_folder):
    """A checkpoint of the folder config's classifier (tiny ResNet-18, a
    random 3-class fc) and its top-1 on val/, computed here."""
    tmp_path = tmp_path_factory.mktemp('linear_classifier')
    cfg = linear_cfg(tmp_path)
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mocoplug'):
        model = MODELS.build(
            dict(
                cfg.model,
                backbone=dict(cfg.model.backbone, init_cfg=None),
                head=dict(cfg.model.head, num_classes=3)))
    model.init_weights()
    with torch.no_grad():  # a classifier that does not say one class only
        model.head.fc.weight.normal_(0, 1)
    ckpt = tmp_path / 'linear.pth'
    torch.save(dict(state_dict=model.state_dict()), ckpt)
    feats, labels = direct_features(model, split_folder / 'val',
                                    cfg.test_dataloader.dataset.pipeline,
                                    cfg.data_preprocessor)
    with torch.no_grad():
        logits = model.head.fc(feats)
    # The runner pools and sums in another order (float32 rounding, ~1e-6
    # of logits of order 1 on any CPU and thread count); a margin far above
    # that between the two best classes means no prediction can flip.
    top2 = logits.topk(2, dim=1).values
    assert (top2[:, 0] - top2[:, 1]).min() > 1e-3
    predicted = logits.argmax(1)
    top1 = 100. * float((predicted == labels).sum()) / len(labels)
    return linear_cfg_file(tmp_path), str(ckpt), top1


def assert_tested_on_the_folder(runner, folder):
    dataset = runner.test_dataloader.dataset
    assert dataset.data_root == str(folder)
    assert dataset.metainfo['classes'] == CLASSES
    paths = [dataset.get_data_info(i)['img_path'] for i in range(len(dataset))]
    assert [osp.relpath(p, folder) for p in paths
            ] == [f'val/{c}/{i}.png' for c in CLASSES for i in range(2)]


def test_linear_folder_config_through_mmpretrain_test_tool(
        monkeypatch, tmp_path, split_folder, linear_classifier):
    """mmpretrain's own tools/test.py (as installed): the config's runner
    takes data_root= from --cfg-options."""
    cfg_file, ckpt, top1 = linear_classifier
    out = tmp_path / 'metrics.json'
    runners = run_packaged_tool(monkeypatch, 'mmpretrain', 'test', [
        cfg_file, ckpt, '--work-dir',
        str(tmp_path), '--cfg-options', f'data_root={split_folder}', '--out',
        str(out), '--out-item', 'metrics'
    ])
    assert [type(r) for r in runners] == [MoCoRunner]
    assert_tested_on_the_folder(runners[0], split_folder)
    assert json.loads(out.read_text())['accuracy/top1'] == pytest.approx(top1)


def test_linear_folder_config_from_a_python_script(tmp_path, split_folder,
                                                   linear_classifier):
    """The call documented for users' own scripts: RUNNERS.build(cfg)."""
    cfg_file, ckpt, top1 = linear_classifier
    cfg = Config.fromfile(cfg_file)
    cfg.merge_from_dict(dict(data_root=str(split_folder)))
    cfg.work_dir = str(tmp_path)
    cfg.load_from = ckpt
    cfg.experiment_name = unique_experiment_name(tmp_path)
    runner = RUNNERS.build(cfg)
    assert type(runner) is MoCoRunner
    metrics = runner.test()
    assert_tested_on_the_folder(runner, split_folder)
    assert metrics['accuracy/top1'] == pytest.approx(top1)


def test_runner_from_cfg_says_to_build_the_config_runner(
        tmp_path, split_folder, moco_checkpoint):
    """mmengine's Runner.from_cfg ignores runner_type, so `pretrained=`
    reaches no init_cfg: training stops, naming the call to use, instead
    of starting from random weights."""
    cfg = linear_cfg(tmp_path)
    cfg.model.head.num_classes = 3  # what the runner takes from data_root
    for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[field].dataset.data_root = str(split_folder)
    cfg.merge_from_dict(dict(pretrained=moco_checkpoint[0]))
    cfg.experiment_name = unique_experiment_name(tmp_path)
    runner = Runner.from_cfg(cfg)
    assert type(runner) is Runner
    with pytest.raises(ValueError, match=r'call `RUNNERS\.build\(cfg\)`'):
        runner.train()
    assert not list((tmp_path / 'work').glob('*.pth'))


def _train_linear_rank(rank: int, port: int, argv: list) -> None:
    import torch.distributed as dist

    from ..conftest import _load_tool_module
    from ..gloo import torchrun_env
    torchrun_env(rank, port)
    _load_tool_module('train').main(argv)
    dist.destroy_process_group()


def test_linear_config_keeps_the_best_checkpoint_on_two_ranks(
        tmp_path, split_folder, moco_checkpoint):
    """save_best='auto' (the usual linear-evaluation setting): its save runs
    on rank 0 alone, after every validation; a collective in a hook there
    waited for rank 1 forever."""
    from ..gloo import free_port, run_two_ranks
    cfg = linear_cfg(tmp_path)
    cfg.default_hooks.checkpoint.save_best = 'auto'
    cfg.env_cfg = dict(dist_cfg=dict(backend='gloo', timeout=60))
    cfg.train_cfg.max_epochs = 2
    cfg.experiment_name = unique_experiment_name(tmp_path)
    for field in ('train_dataloader', 'val_dataloader'):
        cfg[field].batch_size = 3
    path = tmp_path / 'linear_best.py'
    cfg.dump(str(path))
    argv = [
        str(path), '--launcher', 'pytorch', '--cfg-options',
        f'pretrained={moco_checkpoint[0]}', f'data_root={split_folder}'
    ]
    run_two_ranks(_train_linear_rank, free_port(), argv)
    saved = sorted(p.name for p in (tmp_path / 'work').glob('*.pth'))
    assert len(saved) == 2 and saved[1] == 'epoch_2.pth', saved
    assert saved[0].startswith('best_accuracy_top1_epoch_'), saved


def test_a_hidden_folder_is_refused_before_any_feature(tmp_path, load_tool,
                                                       moco_checkpoint):
    """Jupyter's .ipynb_checkpoints in val/: mmpretrain's CustomDataset
    read it as a class (val's cat = 1, dog = 2 against train's 0, 1) while
    the splits were said to agree."""
    root = tmp_path / 'd'
    for split in ('train', 'val'):
        for cls in ('cat', 'dog'):
            (root / split / cls).mkdir(parents=True)
            Image.new('RGB', (8, 8)).save(root / split / cls / '0.png')
    (root / 'val' / '.ipynb_checkpoints').mkdir()
    match = (r"hidden folders \['.ipynb_checkpoints'\], which mmpretrain's "
             'CustomDataset reads as classes')
    with pytest.raises(ValueError, match=match):  # before any model exists
        load_tool('analysis_tools/knn_eval').main(
            [config_path(KNN), moco_checkpoint[0], '--data-root',
             str(root)])
    cfg = Config.fromfile(config_path(LINEAR_FOLDER))
    cfg.data_root = str(root)
    with pytest.raises(ValueError, match=match):
        fill_data_root(cfg)


@pytest.mark.parametrize(
    'splits,match',
    [(('train', ), 'has train/: read are DIR/train/<class>/'),
     (('train', 'test'),
      r'has train/, test/: read are .*rename test/ to val/'),
     ((), r'kNN accuracy needs 2 classes or more, found \[\'cat\'\]')],
    ids=['train-only', 'train-test', 'one-class'])
def test_knn_refuses_an_ambiguous_root(tmp_path, load_tool, moco_checkpoint,
                                       splits, match):
    """train/ alone was read as one class named train (leave-one-out, a
    top-1 printed); train/ + test/ as the classes train and test."""
    root = tmp_path / 'd'
    classes = ('cat', 'dog') if splits else ('cat', )
    for split in splits or ('', ):
        for cls in classes:
            (root / split / cls).mkdir(parents=True)
            Image.new('RGB', (8, 8)).save(root / split / cls / '0.png')
    with pytest.raises(SystemExit, match=match):
        load_tool('analysis_tools/knn_eval').main(
            [config_path(KNN), moco_checkpoint[0], '--data-root',
             str(root)])


def _knn_rank(rank: int, port: int, argv: list) -> None:
    import torch.distributed as dist

    from ..conftest import _load_tool_module
    from ..gloo import torchrun_env
    torchrun_env(rank, port)
    _load_tool_module('analysis_tools/knn_eval').main(argv)
    dist.destroy_process_group()


def test_knn_on_two_cpu_ranks_equals_one_process(split_folder, moco_checkpoint,
                                                 load_tool, tmp_path, capsys):
    """torchrun on CPUs joins a gloo group (mmengine's init_dist selects a
    GPU and nccl); each rank extracts its share, the figures are one
    process's. Progress is logged with images/s; k = 20 and 200 over 12
    memory images are reported as the k used, 12."""
    from ..gloo import free_port, run_two_ranks
    cfg_file, _ = knn_cfg_file(tmp_path)
    common = [cfg_file, moco_checkpoint[0], '--data-root', str(split_folder)]
    one = load_tool('analysis_tools/knn_eval').main(
        common + ['--cfg-options', 'knn.topk=[1,3,20,200]'])
    printed = capsys.readouterr().out
    assert list(one) == ['top1_k1', 'top1_k3', 'top1_k12'], one
    assert 'k=[20, 200] capped at the memory size' in printed
    out = tmp_path / 'two.json'
    run_two_ranks(
        _knn_rank, free_port(), common + [
            '--launcher', 'pytorch', '--out',
            str(out), '--cfg-options', 'knn.topk=[1,3,20,200]'
        ])
    assert json.loads(out.read_text()) == pytest.approx(one)


def test_knn_logs_progress_and_refuses_an_infinite_sampler(
        split_folder, moco_checkpoint, load_tool, tmp_path, monkeypatch):
    import importlib
    module = importlib.import_module(
        'mocoplug.evaluation.functional.extract_features')
    logged = []
    monkeypatch.setattr(module, 'print_log',
                        lambda msg, **kwargs: logged.append(msg))
    cfg_file, _ = knn_cfg_file(tmp_path)
    common = [cfg_file, moco_checkpoint[0], '--data-root', str(split_folder)]
    load_tool('analysis_tools/knn_eval').main(common + [
        '--cfg-options', 'knn.topk=[1]', 'knn_memory_dataloader.batch_size=2'
    ])
    memory = [m for m in logged if m.startswith('memory: ')]
    # 6 batches of 2: logged at each tenth (every batch) up to all 12
    assert len(memory) == 6 and memory[-1].startswith('memory: 12/12 images')
    assert all(m.endswith(' images/s') for m in memory)
    assert [m.split(',')[0] for m in logged
            if m.startswith('queries')][-1] == 'queries: 6/6 images'
    with pytest.raises(
            SystemExit, match='knn_query_dataloader.sampler is an Infinite'):
        load_tool('analysis_tools/knn_eval').main(common + [
            '--cfg-options', 'knn_query_dataloader.sampler.type='
            'InfiniteSampler'
        ])


def test_load_from_a_pretraining_checkpoint_into_the_classifier_is_refused(
        tmp_path, split_folder, moco_checkpoint):
    """`tools/test.py LINEAR_CONFIG moco.pth`: the backbone loads, the
    classifier stays random and a figure was printed; refused, with the
    missing head named and pretrained= given."""
    from mocoplug.utils.resume_fit import ResumeMismatchError
    cfg = linear_cfg(tmp_path)
    cfg.merge_from_dict(dict(data_root=str(split_folder)))
    cfg.load_from = moco_checkpoint[0]
    cfg.experiment_name = unique_experiment_name(tmp_path)
    runner = RUNNERS.build(cfg)
    with pytest.raises(ResumeMismatchError) as info:
        runner.test()
    for part in ('does not fit this ImageClassifier', 'head.fc.weight',
                 'pretrained=PATH'):
        assert part in str(info.value), part


def test_a_backbone_of_another_width_is_refused_by_knn_and_linear(
        tmp_path, load_tool, split_folder):
    """A ResNet-18 of the default widths into the configs' tiny ResNet-18:
    the stem and some BN tensors share shapes (mmengine's loader would
    load them and leave the rest random); refused, layouts named."""
    from mmpretrain.models import ResNet
    other = tmp_path / 'r18_wide.pth'
    torch.save(
        dict(state_dict={
            f'backbone.{k}': v
            for k, v in ResNet(depth=18).state_dict().items()
        }), other)
    match = (r'init_cfg of ResNet.*no known key layout gives all 100 '
             r'tensors.*mocoplug / mmpretrain / mmselfsup \(backbone\.\)')
    cfg_file, _ = knn_cfg_file(tmp_path)
    with pytest.raises(ValueError, match=match):
        load_tool('analysis_tools/knn_eval').main(
            [cfg_file, str(other), '--data-root',
             str(split_folder)])
    with pytest.raises(ValueError, match=match):
        load_tool('train').main([
            linear_cfg_file(tmp_path), '--cfg-options', f'pretrained={other}',
            f'data_root={split_folder}'
        ])
    assert not list((tmp_path / 'work').glob('*.pth'))
