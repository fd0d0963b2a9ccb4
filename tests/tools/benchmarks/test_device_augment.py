# Copyright (c) mocoplug contributors. All rights reserved.


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
