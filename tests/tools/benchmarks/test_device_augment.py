# Copyright (c) mocoplug contributors. All rights reserved.
from types import SimpleNamespace


def test_resnet18_folder_runs_differ_only_in_the_augmentation_path(
        benchmark_command):
    bench = benchmark_command('device-augment')
    cfgs = {
        path: bench.resnet18_folder_cfg(path, '/data', 32)
        for path in ('per-image', 'device-aug', 'device-decode')
    }
    steps = {
        path: [t['type'] for t in cfg.train_dataloader.dataset.pipeline]
        for path, cfg in cfgs.items()
    }
    assert steps == {
        'per-image':
        ['mocoplug.CheckedLoadImageFromFile', 'MultiView', 'PackInputs'],
        'device-aug': [
            'mocoplug.CheckedLoadImageFromFile', 'mocoplug.GeometricMultiView',
            'PackInputs'
        ],
        'device-decode': [
            'mocoplug.LoadImageBytes', 'mocoplug.CropBoxMultiView',
            'mocoplug.PackEncodedViews'
        ]
    }
    for path, cfg in cfgs.items():
        assert cfg.model == cfgs['per-image'].model
        assert cfg.model.backbone.depth == 18
        assert cfg.train_dataloader.batch_size == 32
        views = cfg.train_dataloader.dataset.pipeline[1].transforms
        assert views[0][0].scale == 64
        expected = 'SelfSupDataPreprocessor' if path == 'per-image' else \
            'mocoplug.DeviceAugmentDataPreprocessor'
        assert cfg.data_preprocessor.type == expected


def test_throughput_clock_starts_after_the_warmup_iterations(
        benchmark_command):
    bench = benchmark_command('device-augment')
    clock = bench.Throughput(warmup=2)
    stamps = []
    for it in range(5):
        clock.before_train_iter(SimpleNamespace(iter=it), it)
        if it == 2:
            stamps.append(clock.start)
        clock.after_train_iter(SimpleNamespace(iter=it), it)
    assert stamps[0] is not None and clock.start == stamps[0]
    assert clock.end >= clock.start
