# Copyright (c) mocoplug contributors. All rights reserved.
import json
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.registry import DefaultScope

from mocoplug.evaluation import linear_probe_accuracy, stratified_label_subsets


def raw_pixel_features(dataset, mean, std):
    """The demo's raw-pixel features: preprocessed grey levels."""
    feats = [(s['inputs'][0].float().flatten() - mean) / std for s in dataset]
    labels = [int(s['data_samples'].gt_label) for s in dataset]
    return torch.stack(feats), torch.tensor(labels)


def knn_reference(query, labels, bank, bank_labels, k, t, num_classes=10):
    """Weighted-kNN top-1 (%) with float64 similarities, and how many of
    its decisions a float32 computation could make otherwise.

    A float32 similarity of unit d-vectors is within delta = gamma_d + 6 u
    of the exact one on any CPU (worst case, any summation order; u =
    2^-24). A decision is fixed unless, with every similarity moved by up
    to delta, the winning class's vote (its sure neighbours only, scaled by
    e^(-delta/t)) could fall below another class's (its sure and possible
    neighbours, e^(delta/t)); a neighbour is sure when it beats the k-th by
    more than 2 delta, possible within 2 delta of it."""
    u, d = 2.0**-24, query.shape[1]
    delta = d * u / (1 - d * u) + 6 * u
    query = F.normalize(query.double(), dim=1)
    sims = query @ F.normalize(bank.double(), dim=1).t()
    top = sims.topk(k, dim=1)
    votes = torch.zeros(len(query), num_classes, dtype=torch.float64)
    votes.scatter_add_(1, bank_labels[top.indices], (top.values / t).exp())
    win = votes.argmax(1)
    kth = top.values[:, -1:]
    weights = (sims / t).exp()
    onehot = F.one_hot(bank_labels, num_classes).double()
    sure = (sims > kth + 2 * delta).double()
    possible = ((sims - kth).abs() <= 2 * delta).double()
    low = ((sure * weights) @ onehot).gather(1, win[:, None]).squeeze(1)
    low *= math.exp(-delta / t)
    high = math.exp(delta / t) * (((sure + possible) * weights) @ onehot)
    high.scatter_(1, win[:, None], -math.inf)
    fragile = int((low <= high.max(1).values).sum())
    accuracy = (win == labels).double().mean().item() * 100
    return accuracy, fragile


def test_bn_statistics_are_the_exact_dataset_average(load_tool):
    demo = load_tool('demo')

    class Tiny(nn.Module):

        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(
                nn.Conv2d(3, 2, 1), nn.BatchNorm2d(2))
            self.data_preprocessor = lambda data, training: data

    model = Tiny().double()
    batches = [
        dict(inputs=torch.randn(4, 3, 2, 2, dtype=torch.float64) * (i + 1))
        for i in range(3)
    ]
    demo.estimate_bn_statistics(model, batches)
    conv = model.backbone[0]
    with torch.no_grad():
        means = [conv(b['inputs']).mean((0, 2, 3)) for b in batches]
    bn = model.backbone[1]
    # float64: BN's batch means and the running average against these
    # means of 16 outputs of size <= 10, in any order: within 20 x 2^-53 x
    # 10 < 1e-13 (float32's bound, 1.2e-5, exceeded the old atol=1e-6)
    assert torch.allclose(
        bn.running_mean, torch.stack(means).mean(0), rtol=0, atol=1e-12)
    assert bn.momentum == 0.1 and not model.training


def test_summary_pools_seeds_and_label_draws(load_tool):
    """Mean and sample standard deviation, by hand: kNN over the seeds,
    the linear figures over seeds x draws."""
    demo = load_tool('demo')
    runs = [
        dict(
            knn=dict(clean=90., perturbed=80.),
            linear={'1%': dict(clean=[60., 70.], perturbed=[30., 40.])}),
        dict(
            knn=dict(clean=94., perturbed=84.),
            linear={'1%': dict(clean=[80., 90.], perturbed=[50., 60.])}),
    ]
    summary = demo.summarise({'MoCo v2': runs})['MoCo v2']
    assert summary['knn']['clean'] == dict(
        mean=92., std=pytest.approx(np.sqrt(8.)), n=2)
    # 60, 70, 80, 90: mean 75, sample variance (225+25+25+225)/3
    assert summary['linear']['1%']['clean'] == dict(
        mean=75., std=pytest.approx(np.sqrt(500 / 3)), n=4)
    assert summary['linear']['1%']['perturbed']['mean'] == 45.
    single = demo.summarise({'raw': runs[:1]})['raw']
    assert single['knn']['perturbed'] == dict(mean=80., std=0., n=1)


def test_tables_show_every_encoder_and_figure(load_tool):
    demo = load_tool('demo')

    def stat(mean, std):
        return dict(mean=mean, std=std, n=3)

    summary = {
        name:
        dict(
            knn=dict(clean=stat(base, 0.5), perturbed=stat(base - 20, 1.25)),
            linear={
                key:
                dict(
                    clean=stat(base - k, 2.),
                    perturbed=stat(base - k - 30, 3.))
                for key, k in (('1%', 10), ('10%', 5))
            })
        for name, base in (('raw pixels', 98.3), ('random init', 75.),
                           ('MoCo v2', 97.))
    }
    text = demo.format_tables(summary, [0, 1, 2], {
        0.01: 10,
        0.1: 3
    }, {
        '1%': 12,
        '10%': 125
    })
    lines = text.splitlines()
    assert 'seeds 0, 1, 2' in lines[0]
    assert lines[2].split() == [
        'raw', 'pixels', '98.3', '±', '0.5', '78.3', '±', '1.2'
    ]
    moco = [line for line in lines if line.startswith('MoCo v2')]
    assert moco[0].split()[2:] == ['97.0', '±', '0.5', '77.0', '±', '1.2']
    assert moco[1].split()[2:] == [
        '87.0', '±', '2.0', '57.0', '±', '3.0', '92.0', '±', '2.0', '62.0',
        '±', '3.0'
    ]
    assert '1%: 10 draws, 12 labels' in text
    assert '10%: 3 draws, 125 labels' in text


def test_demo_end_to_end_one_epoch_one_seed(tmp_path, load_tool):
    """Every output of the demo on 1 epoch and 1 seed (the real demo runs
    3 seeds; README has its figures). Raw pixels do not depend on the
    pretraining: their figures are checked against direct computations."""
    demo = load_tool('demo')
    results = demo.main(
        ['--work-dir',
         str(tmp_path), '--epochs', '1', '--seeds', '0'])
    saved = json.loads((tmp_path / 'results.json').read_text())
    assert saved['summary'] == results['summary']  # JSON keeps floats
    assert list(saved['summary']) == ['raw pixels', 'random init', 'MoCo v2']
    assert saved['seeds'] == [0] and saved['epochs'] == 1
    for name, per_seed in saved['per_seed'].items():
        assert len(per_seed) == 1
        assert set(per_seed[0]['linear']) == {'1%', '10%'}
        draws = per_seed[0]['linear']['1%']['clean']
        assert len(draws) == 10
        assert saved['summary'][name]['linear']['1%']['clean'][
            'mean'] == pytest.approx(np.mean(draws))
    raw = saved['per_seed']['raw pixels'][0]
    # kNN on raw pixels (the preprocessed grey levels) of the same digits:
    # the figures README quotes (98.3%, 70.5%) are those of float64
    # similarities; the demo's float32 ones may differ only through the
    # decisions that round-off could change on some CPU (knn_reference)
    cfg = Config.fromfile(demo.CONFIG).data_preprocessor
    mean, std = cfg.mean[0], cfg.std[0]
    with DefaultScope.overwrite_default_scope('mocoplug'):
        loaders = dict(
            train=demo.digits_loader('train', False),
            clean=demo.digits_loader('test', False),
            perturbed=demo.digits_loader('test', True))
        raw_feats = {
            name: raw_pixel_features(loader.dataset, mean, std)
            for name, loader in loaders.items()
        }
    for name, known in (('clean', 98.330), ('perturbed', 70.501)):
        reference, fragile = knn_reference(*raw_feats[name],
                                           *raw_feats['train'], demo.KNN['k'],
                                           demo.KNN['temperature'])
        assert reference == pytest.approx(known, abs=1e-3)
        assert fragile <= 10  # 1 (clean) and 6 (perturbed) of 539 today
        assert raw['knn'][name] == pytest.approx(
            reference, abs=fragile * 100 / len(raw_feats[name][1]) + 1e-9)
    # label efficiency on raw pixels, recomputed from the same features
    # (bit for bit the demo's: elementwise float32 ops) with the same float64
    # standardisation and fits in the same process: the same figures. (Raw
    # grey levels would give the same figures only up to the fits'
    # convergence tolerance, which can move a prediction near a boundary.)
    train, clean = raw_feats['train'], raw_feats['clean']
    subsets = stratified_label_subsets(train[1], 0.01, 10, seed=0)
    expected = linear_probe_accuracy(*train, dict(clean=clean), subsets)
    assert raw['linear']['1%']['clean'] == expected['clean']
    assert (tmp_path / 'results.png').stat().st_size > 10000
    assert (tmp_path / 'seed0').is_dir()
    check_report(demo, load_tool, tmp_path, saved['report'])


def check_report(demo, load_tool, work_dir, report):
    """The demo's report compares the models it measured: MoCo's embedding
    is embed.py's of the run's own checkpoint, and random init is the one
    with its BN statistics estimated (not the init's 0 / 1)."""
    page = work_dir / 'report' / 'index.html'
    assert report['page'] == str(page) and page.stat().st_size > 1000
    assert set(report['figures']) == {
        'embed_moco.npz (' + str(work_dir / 'moco.pth') + ')',
        'embed_random_init.npz (' + str(work_dir / 'random_init.pth') + ')'
    }
    for figures in report['figures'].values():
        assert figures['k'] == 20 and 0 <= figures['top1'] <= 100
        assert len(figures['views']) == 1
    own = load_tool('analysis_tools/embed').main([
        demo.CONFIG,
        str(work_dir / 'seed0' / 'epoch_1.pth'), '--data-root',
        str(work_dir / 'digits' / 'val'), '--out',
        str(work_dir / 'own.npz'), '--size', '32', '--workers', '0'
    ])
    moco = np.load(work_dir / 'embed_moco.npz')
    assert np.array_equal(own['paths'], moco['paths'])
    for field in ('backbone', 'embedding', 'views'):
        assert np.array_equal(own[field], moco[field]), field
    random_init = torch.load(work_dir / 'random_init.pth')['state_dict']
    variances = [
        v for k, v in random_init.items()
        if k.startswith('backbone.') and k.endswith('_var')
    ]
    assert variances and all(not torch.all(v == 1) for v in variances)


def test_device_augment_option_pretrains_with_the_device_path(load_tool):
    demo = load_tool('demo')
    cfg = demo.load_config(4, demo.DEVICE_AUGMENT_CONFIG)
    assert cfg.data_preprocessor.type == \
        'mocoplug.DeviceAugmentDataPreprocessor'
    assert cfg.train_cfg.max_epochs == cfg.param_scheduler[0].T_max == 4
    plain = demo.load_config(4)
    assert plain.model == cfg.model  # the same MoCo, other augmentation
    assert plain.data_preprocessor.type == 'SelfSupDataPreprocessor'
