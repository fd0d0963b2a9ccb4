# Copyright (c) mocoplug contributors. All rights reserved.
import json

import pytest
import torch
import torch.nn as nn


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


def test_demo_end_to_end_one_epoch(tmp_path, load_tool):
    """The two runs, the four encoders and every output file, on 1 epoch
    (the real demo runs 30; README has its figures)."""
    summary = load_tool('demo').main(
        ['--work-dir', str(tmp_path), '--epochs', '1'])
    saved = json.loads((tmp_path / 'results.json').read_text())
    for name, figures in summary['results'].items():
        assert saved['results'][name] == pytest.approx(figures)
    assert list(saved['results']) == [
        'raw pixels', 'random init (same encoder)', 'MoCo v2',
        'MoCo v2 + exclude_same_instance'
    ]
    for figures in saved['results'].values():
        assert set(figures) == {'clean', 'perturbed'}
        assert 0 <= figures['perturbed'] <= figures['clean'] + 10 <= 110
    # raw pixels of the same digits: a fixed, known pair of figures
    assert saved['results']['raw pixels'] == pytest.approx(
        {
            'clean': 98.330,
            'perturbed': 70.501
        }, abs=0.01)
    for name in ('loss.png', 'contrast_acc.png', 'knn.png'):
        assert (tmp_path / 'curves' / name).exists()
    assert (tmp_path / 'plain').is_dir()
    assert (tmp_path / 'exclude_same_instance').is_dir()
