# MoCo v1, ResNet-50, 8 GPUs x 32, step lr, 200 epochs, ImageNet-1k.
# "Momentum Contrast for Unsupervised Visual Representation Learning"
# (He et al., CVPR 2020): linear projection 2048->128, tau=0.07, K=65536,
# m=0.999, SGD lr 0.03 (batch 256) momentum 0.9 wd 1e-4, lr x0.1 at epochs
# 120 and 160, v1 augmentation (no blur). Published linear top-1: 60.6.
_base_ = '../mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py'

model = dict(
    neck=dict(
        type='MoCoProjectionNeck',
        in_channels=2048,
        hid_channels=2048,  # unused with one layer
        out_channels=128,
        num_layers=1),
    head=dict(type='InfoNCEHead', temperature=0.07))

# The official v1 augmentation: crop (scale 0.2-1), grayscale p=0.2, colour
# jitter 0.4 always (hue 0.4 too), flip. Images are loaded as BGR, hence the
# grayscale channel weights in B, G, R order. Fast* are mocoplug's faster
# versions of mmpretrain's transforms (same parameters and random draws);
# see _base_/datasets/imagenet_bs32_mocov2.py for the `mocoplug.` prefix.
view_pipeline = [
    dict(
        type='RandomResizedCrop',
        scale=224,
        crop_ratio_range=(0.2, 1.),
        backend='pillow'),
    dict(
        type='mocoplug.FastRandomGrayscale',
        prob=0.2,
        keep_channels=True,
        channel_weights=(0.114, 0.587, 0.2989)),
    dict(
        type='mocoplug.FastColorJitter',
        brightness=0.4,
        contrast=0.4,
        saturation=0.4,
        hue=0.4),
    dict(type='RandomFlip', prob=0.5),
]
train_pipeline = [
    dict(type='LoadImageFromFile', imdecode_backend='cv2'),
    dict(type='MultiView', num_views=2, transforms=[view_pipeline]),
    dict(type='PackInputs')
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))

param_scheduler = [
    dict(type='MultiStepLR', by_epoch=True, milestones=[120, 160], gamma=0.1)
]
