# Copyright (c) mocoplug contributors. All rights reserved.
import json

import numpy as np
import pytest
import torch
import torch.nn as nn

from mocoplug.evaluation import linear_probe_accuracy, stratified_label_subsets


def test_bn_statistics_are_the_exact_dataset_average(load_tool):
    demo = load_tool('demo')

    class Tiny(nn.Module):

        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(
                nn.Conv2d(3, 2, 1), nn.BatchNorm2d(2))
            self.data_preprocessor = lambda data, training: data

    model = Tiny()
    batches = [
        dict(inputs=torch.randn(4, 3, 2, 2) * (i + 1)) for i in range(3)
    ]
    demo.estimate_bn_statistics(model, batches)
    conv = model.backbone[0]
    with torch.no_grad():
        means = [conv(b['inputs']).mean((0, 2, 3)) for b in batches]
    bn = model.backbone[1]
    assert torch.allclose(
        bn.running_mean, torch.stack(means).mean(0), atol=1e-6)
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
    # kNN on raw pixels of the same digits: a fixed, known pair of figures
    assert raw['knn'] == pytest.approx(
        dict(clean=98.330, perturbed=70.501), abs=0.01)
    # label efficiency on raw pixels, recomputed from the images
    feats = {
        name: (
            torch.stack([
                s['inputs'][0].float().flatten()  # the grey levels
                for s in loader.dataset
            ]),
            torch.tensor(
                [int(s['data_samples'].gt_label) for s in loader.dataset]))
        for name, loader in (('train', demo.digits_loader('train', False)),
                             ('clean', demo.digits_loader('test', False)))
    }
    # raw features are the preprocessed grey levels, an affine map of the
    # images' grey levels that the standardisation undoes
    subsets = stratified_label_subsets(feats['train'][1], 0.01, 10, seed=0)
    expected = linear_probe_accuracy(*feats['train'],
                                     dict(clean=feats['clean']), subsets)
    assert raw['linear']['1%']['clean'] == pytest.approx(
        expected['clean'], abs=1e-6)
    assert (tmp_path / 'results.png').stat().st_size > 10000
    assert (tmp_path / 'seed0').is_dir()


def test_device_augment_option_pretrains_with_the_device_path(load_tool):
    demo = load_tool('demo')
    cfg = demo.load_config(4, demo.DEVICE_AUGMENT_CONFIG)
    assert cfg.data_preprocessor.type == \
        'mocoplug.DeviceAugmentDataPreprocessor'
    assert cfg.train_cfg.max_epochs == cfg.param_scheduler[0].T_max == 4
    plain = demo.load_config(4)
    assert plain.model == cfg.model  # the same MoCo, other augmentation
    assert plain.data_preprocessor.type == 'SelfSupDataPreprocessor'
