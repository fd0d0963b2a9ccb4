# Copyright (c) mocoplug contributors. All rights reserved.
import json

import pytest
import torch
import torch.nn as nn
from mmengine.config import Config
from mmpretrain.models import ResNet

from .conftest import config_path, shrink_crops
from .knn_margin import assert_knn_well_conditioned

LINEAR = 'benchmarks/linear_r50_8xb32-steplr-100e_in1k.py'
KNN = 'benchmarks/knn_r50_in1k.py'


@pytest.fixture(scope='module')
def r50_checkpoint(tmp_path_factory):
    """A MoCo-style checkpoint: query encoder `backbone.*` (a random
    ResNet-50) and a different key encoder. Its residual branches' last BN
    is not zero-initialised: with mmpretrain's default an untrained R50
    gives 32 px digits of both classes features equal to 1e-6, and a kNN
    check would compare how round-off breaks the ties."""
    torch.manual_seed(0)
    query = ResNet(depth=50, zero_init_residual=False)
    key = ResNet(depth=50)
    query.init_weights()
    state = {f'backbone.{k}': v for k, v in query.state_dict().items()}
    state['momentum_encoder.backbone.conv1.weight'] = key.conv1.weight
    path = tmp_path_factory.mktemp('r50') / 'moco_r50.pth'
    torch.save(dict(state_dict=state), path)
    return str(path), query


def test_linear_protocol_values():
    cfg = Config.fromfile(config_path(LINEAR))
    assert cfg.optim_wrapper.optimizer == dict(
        type='SGD', lr=30., momentum=0.9, weight_decay=0.)
    assert cfg.param_scheduler[0].milestones == [60, 80]
    assert cfg.train_cfg.max_epochs == 100
    assert cfg.train_dataloader.batch_size * 8 == 256
    assert cfg.model.backbone.frozen_stages == 4
    assert cfg.model.backbone.norm_eval is True
    assert cfg.model.backbone.init_cfg == dict(
        type='Pretrained',
        _scope_='mocoplug',
        checkpoint=None,
        prefix='backbone.')
    assert cfg.model.head.init_cfg == dict(
        type='Normal', layer='Linear', std=0.01, bias=0.)


def test_linear_eval_trains_only_the_classifier(tmp_path, load_tool,
                                                tiny_data_cfg, r50_checkpoint):
    """tools/train.py with the shipped config: the backbone is the query
    encoder, stays frozen (weights and BN statistics), the fc trains."""
    path, query = r50_checkpoint
    cfg = tiny_data_cfg(LINEAR, tmp_path / 'work', n=4, labelled=True)
    cfg.train_cfg.max_epochs = 1
    cfg_file = tmp_path / 'linear.py'
    cfg.dump(str(cfg_file))
    runner = load_tool('train').main(
        [str(cfg_file), '--cfg-options', f'pretrained={path}'])
    model = runner.model
    for name, tensor in model.backbone.state_dict().items():
        assert torch.equal(tensor, query.state_dict()[name]), name
    assert not any(p.requires_grad for p in model.backbone.parameters())
    assert all(not m.training for m in model.backbone.modules()
               if isinstance(m, nn.BatchNorm2d))
    assert model.head.fc.weight.requires_grad
    # the val loop ran the shipped evaluator (mmpretrain's Accuracy)
    top1 = runner.message_hub.get_scalar('val/accuracy/top1').current()
    assert 0 <= top1 <= 100


def test_linear_head_init_is_normal_0_01():
    from mmengine.registry import DefaultScope

    from mocoplug.registry import MODELS
    cfg = Config.fromfile(config_path(LINEAR))
    cfg.model.backbone.init_cfg = None
    with DefaultScope.overwrite_default_scope('mocoplug'):
        model = MODELS.build(cfg.model)
    model.init_weights()
    assert model.head.fc.weight.std().item() == pytest.approx(0.01, rel=0.05)
    assert torch.all(model.head.fc.bias == 0)


def test_knn_tool_matches_a_direct_computation(tmp_path, load_tool,
                                               image_folder, r50_checkpoint):
    path, query_encoder = r50_checkpoint
    cfg = Config.fromfile(config_path(KNN))
    for field in ('knn_memory_dataloader', 'knn_query_dataloader'):
        loader = cfg[field]
        loader.dataset = dict(
            type='CustomDataset',
            data_root=image_folder,
            pipeline=shrink_crops(loader.dataset.pipeline, 32))
        loader.num_workers = 0
        loader.batch_size = 8
    cfg.knn = dict(topk=(3, ), temperature=0.07)
    cfg_file = tmp_path / 'knn.py'
    cfg.dump(str(cfg_file))
    out = tmp_path / 'knn.json'
    results = load_tool('analysis_tools/knn_eval').main(
        [str(cfg_file), path, '--out', str(out)])
    assert json.loads(out.read_text()) == results

    # by hand: the same 16 images (8 per class) through the query encoder;
    # every image is its own nearest neighbour in the memory, so the top-1
    # is the share whose 3-NN weighted vote gives its own class
    from mmengine.dataset import default_collate
    from mmengine.registry import DefaultScope

    from mocoplug.registry import DATASETS, MODELS
    with DefaultScope.overwrite_default_scope('mocoplug'):
        dataset = DATASETS.build(cfg.knn_query_dataloader.dataset)
        pre = MODELS.build(
            dict(cfg.data_preprocessor, type='ClsDataPreprocessor'))
    batch = pre(default_collate([dataset[i] for i in range(len(dataset))]))
    query_encoder.eval()
    with torch.no_grad():
        feats = query_encoder(batch['inputs'])[-1].mean((2, 3))
    feats = torch.nn.functional.normalize(feats, dim=1)
    labels = torch.tensor([int(s.gt_label) for s in batch['data_samples']])
    # discrete: no decision within round-off of a tie (knn_margin.py)
    assert_knn_well_conditioned(feats, feats, labels, 3, 0.07, 2)
    correct = 0
    for i in range(len(feats)):
        sims = feats @ feats[i]
        top = sims.topk(3).indices
        votes = torch.zeros(2)
        for j in top:
            votes[labels[j]] += torch.exp(sims[j] / 0.07)
        correct += int(votes.argmax() == labels[i])
    assert results['top1_k3'] == pytest.approx(100 * correct / len(feats))
