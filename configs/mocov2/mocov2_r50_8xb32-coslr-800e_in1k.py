# MoCo v2, ResNet-50, 8 GPUs x 32, cosine lr over 800 epochs, ImageNet-1k.
# Same recipe as the 200-epoch config, longer. Published linear top-1: 71.1.
_base_ = './mocov2_r50_8xb32-coslr-200e_in1k.py'

param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=800, by_epoch=True, begin=0, end=800)
]
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=800)
