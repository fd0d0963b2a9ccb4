# ImageNet-1k, 32 images per GPU, MoCo v2's two views: mmpretrain's dataset
# base with mocoplug's faster transforms and the collate fix below.
_base_ = 'mmpretrain::_base_/datasets/imagenet_bs32_mocov2.py'

# mmpretrain's MoCo v2 augmentation (same transforms, parameters and random
# draws), with mocoplug's faster colour jitter, grayscale and blur (~1.5x
# the images/s per data-loader worker; values: mocoplug/datasets/transforms/,
# speed: python tools/benchmarks/benchmark.py pipeline). JPEGs are decoded
# with OpenCV, the fastest decoder measured. The `mocoplug.` prefix finds our
# transforms even when the dataset is built in mmpretrain's scope (the train
# loop, from mmpretrain's schedule base, sets it).
view_pipeline = [
    dict(
        type='RandomResizedCrop',
        scale=224,
        crop_ratio_range=(0.2, 1.),
        backend='pillow'),
    dict(
        type='RandomApply',
        transforms=[
            dict(
                type='mocoplug.FastColorJitter',
                brightness=0.4,
                contrast=0.4,
                saturation=0.4,
                hue=0.1)
        ],
        prob=0.8),
    dict(
        type='mocoplug.FastRandomGrayscale',
        prob=0.2,
        keep_channels=True,
        channel_weights=(0.114, 0.587, 0.2989)),
    dict(
        type='mocoplug.FastGaussianBlur',
        magnitude_range=(0.1, 2.0),
        magnitude_std='inf',
        prob=0.5),
    dict(type='RandomFlip', prob=0.5),
]
train_pipeline = [
    dict(type='LoadImageFromFile', imdecode_backend='cv2'),
    dict(type='MultiView', num_views=2, transforms=[view_pipeline]),
    dict(type='PackInputs')
]

# mmengine 0.10.7 tags every dict inherited from an `mmpretrain::` base with
# `_scope_` and passes all keys of `collate_fn` to the function, which then
# fails on `_scope_`: restate the collate function without it.
train_dataloader = dict(
    collate_fn=dict(_delete_=True, type='default_collate'),
    dataset=dict(pipeline=train_pipeline))
