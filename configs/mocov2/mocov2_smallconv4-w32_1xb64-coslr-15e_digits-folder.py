# The folder recipe on one CPU: mocov2_r50_8xb32-coslr-200e_folder.py with
# only the data root, the CPU sizes (4-layer CNN, 32 px crops, batch 64,
# 15 epochs) and the queue its rule ties to the folder's size, here
# scikit-learn's 1258 training digits written as PNG files:
#   python -c "from mocoplug.datasets import write_digits_folder; \
#       write_digits_folder('data/digits')"
#   python tools/train.py \
#       configs/mocov2/mocov2_smallconv4-w32_1xb64-coslr-15e_digits-folder.py
# Start from it for your own small folder: set data_root and the queue by
# the rule (configs/mocov2/README.md, "Your own folder").
_base_ = './mocov2_r50_8xb32-coslr-200e_folder.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='SmallConvNet',
        channels=(32, 64, 128, 256),
        pool_after=(0, 1, 2)),
    neck=dict(in_channels=256, hid_channels=256),
    # at most 4 keys per image: 4096 <= 4 x 1258
    queue=dict(size=4096),
    # one process: Shuffle BN emulated over 4 slices of the batch
    shuffle_bn='split',
    num_splits=4)

# The ImageNet views with 32 px crops.
view_pipeline = [
    dict(
        type='RandomResizedCrop',
        scale=32,
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
train_dataloader = dict(
    batch_size=64,
    num_workers=2,
    dataset=dict(
        data_root='data/digits/train',
        pipeline=[
            dict(
                type='mocoplug.CheckedLoadImageFromFile',
                imdecode_backend='cv2',
                skip_unreadable=False,
                max_unreadable_ratio=0.01),
            dict(type='MultiView', num_views=2, transforms=[view_pipeline]),
            dict(type='PackInputs'),
        ]))

param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=15, by_epoch=True, begin=0, end=15)
]
train_cfg = dict(max_epochs=15)
default_hooks = dict(
    logger=dict(interval=10), checkpoint=dict(interval=15, max_keep_ckpts=1))
