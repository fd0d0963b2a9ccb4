# The demo (`make demo`): MoCo v2 on scikit-learn's digits (32 px), a 4-layer
# CNN, 1 CPU/GPU x 64, SplitBN, 15 epochs (about a minute on 2 CPU cores).
# How the recipe was chosen, and its kNN results: configs/mocov2/README.md.
_base_ = ['../_base_/default_runtime.py']

data_preprocessor = dict(
    type='SelfSupDataPreprocessor',
    mean=[78.3, 78.3, 78.3],  # the digits' pixel statistics
    std=[82.8, 82.8, 82.8],
    to_rgb=True)

model = dict(
    type='MoCo',
    backbone=dict(
        type='SmallConvNet', channels=(32, 64, 128, 256),
        pool_after=(0, 1, 2)),
    # The MoCo v2 MLP with BN layers (as MoCo v3's projector). On a dataset
    # this small the plain fc-ReLU-fc can collapse to one output vector that
    # drifts with the key encoder (current keys then beat the queue's
    # without telling images apart); a last BN without affine forbids a
    # constant output.
    neck=dict(
        type='MoCoProjectionNeck',
        in_channels=256,
        hid_channels=256,
        out_channels=64,
        num_layers=2,
        with_bias=False,
        with_bn=True,
        with_last_bn=True,
        with_last_bn_affine=False),
    head=dict(type='InfoNCEHead', temperature=0.2),
    # The queue is larger than the dataset (1258 images): each image has
    # about 3 older keys in it, false negatives; a 1024-key queue did worse
    # (configs/mocov2/README.md).
    queue=dict(type='NegativeKeyQueue', size=4096, dim=64),
    shuffle_bn='split',
    num_splits=4)

# Views matched to what handwritten digits vary in, which is also what the
# demo's perturbation draws from: shift, rotation and zoom over the same
# ranges (20 deg / 0.1 / 0.8-1.2), contrast, and blur (stroke width). No
# brightness change, no crop (a cropped 7 is a 1) and no flips (a mirrored
# 2 is not a 2).
view_pipeline = [
    dict(type='NumpyToPIL', to_rgb=True),
    dict(
        type='torchvision/RandomAffine',
        degrees=20,
        translate=(0.1, 0.1),
        scale=(0.8, 1.2)),
    dict(type='PILToNumpy', to_bgr=True),
    dict(
        type='RandomApply',
        transforms=[dict(type='ColorJitter', contrast=0.5)],
        prob=0.8),
    dict(
        type='GaussianBlur',
        magnitude_range=(0.1, 1.0),
        magnitude_std='inf',
        prob=0.5),
]
train_pipeline = [
    dict(type='MultiView', num_views=2, transforms=[view_pipeline]),
    dict(type='PackInputs'),
]
train_dataloader = dict(
    batch_size=64,
    num_workers=0,
    drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(
        type='DigitsDataset',
        split='train',
        with_label=False,
        pipeline=train_pipeline))

# Labelled splits for the kNN monitor only (never seen by the loss).
knn_dataloader = dict(
    batch_size=256,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(
        type='DigitsDataset',
        split='train',
        pipeline=[dict(type='PackInputs')]))

custom_hooks = [
    dict(type='MomentumUpdateHook', momentum=0.99),
    dict(
        type='KNNMonitorHook',
        memory_dataloader=knn_dataloader,
        query_dataloader=dict(
            knn_dataloader,
            dataset=dict(knn_dataloader['dataset'], split='test')),
        interval=3,
        topk=(20, ),
        temperature=0.07),
]

# lr 0.005 for batch 64: MoCo's CIFAR lr 0.06 (for batch 512) kept the loss
# above ln(K) (configs/mocov2/README.md). MoCo v2's wd 1e-4.
optim_wrapper = dict(
    type='OptimWrapper',
    # fused: torch's one-pass SGD kernel, the default's update to float32
    # rounding (tests/configs/test_fused_optimizers.py)
    optimizer=dict(
        type='SGD', lr=0.005, momentum=0.9, weight_decay=1e-4, fused=True))
param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=15, by_epoch=True, begin=0, end=15)
]
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=15)

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10),
    checkpoint=dict(type='CheckpointHook', interval=15, max_keep_ckpts=1))
randomness = dict(seed=0)
