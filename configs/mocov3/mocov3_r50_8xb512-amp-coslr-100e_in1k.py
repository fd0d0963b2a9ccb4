# MoCo v3, ResNet-50, 8 GPUs x 512 images (batch 4096), AMP, cosine lr,
# 100 epochs on ImageNet-1k.
# "An Empirical Study of Training Self-Supervised Vision Transformers"
# (Chen, Xie, He, ICCV 2021, https://arxiv.org/abs/2104.02057) and its code
# (facebookresearch/moco-v3, CONFIG.md "ResNet-50, 100-epoch pre-training":
# main_moco.py --moco-m-cos --crop-min=.2, defaults lr 0.6, wd 1e-6,
# moco-m 0.99, moco-t 1.0, 10 warmup epochs, LARS, batch 4096).
# Published linear top-1 (not measured here): 68.9 (100 ep), 72.8 (300 ep,
# with lr 0.3 per 256 and --epochs=300).
#
#   tools/dist_train.sh \
#       configs/mocov3/mocov3_r50_8xb512-amp-coslr-100e_in1k.py 8
# The dataset base: the official two asymmetric views, crop scale (0.2, 1)
# as --crop-min=.2, 512 images per GPU. The model base: MoCo v3's MLPs.
_base_ = [
    '../_base_/datasets/imagenet_bs512_mocov3.py',
    '../_base_/models/mocov3.py',
    '../_base_/default_runtime.py',
]

temperature = 1.0
model = dict(
    backbone=dict(
        type='ResNet',
        depth=50,
        # SyncBN everywhere (the MLPs' too), as the official code
        norm_cfg=dict(type='SyncBN'),
        # torchvision resnet50(zero_init_residual=True) in the official code
        zero_init_residual=True),
    # projector 2048-4096-256 on the pooled features
    neck=dict(in_channels=2048, num_layers=2, with_avg_pool=True),
    # CE over the 4096 keys of the global batch, times 2 * tau
    head=dict(
        type='InfoNCEHead',
        temperature=temperature,
        loss=dict(type='CrossEntropyLoss', loss_weight=2 * temperature)))

# LARS as in the authors' code (moco/optimizer.py): lr 0.6 x 4096 / 256 =
# 9.6, wd 1e-6, momentum 0.9, trust coefficient 0.001. Weights (ndim > 1)
# get weight decay and the trust ratio eta ||w|| / ||g + wd w||; every 1-D
# parameter (norm gamma/beta, biases, the projector's and predictor's BN
# included) neither, told apart by shape; the lr multiplies the momentum
# buffer at each step. See MoCoV3LARS. This is the optimizer of the
# published 68.9 (100 ep) / 72.8 (300 ep) linear top-1.
#
# mmpretrain's LARS instead (trust ratio eta ||w|| / (||g|| + wd ||w||),
# lr folded into the buffer, 1-D parameters excluded by
# LARSOptimWrapperConstructor):
#   --cfg-options optim_wrapper.optimizer.type=LARS \
#       optim_wrapper.constructor=LARSOptimWrapperConstructor
# It is the optimizer of mmpretrain's own MoCo v3 R50 figures (69.6 / 72.8
# / 74.4 linear top-1 after 100 / 300 / 800 epochs, configs/mocov3 of
# mmpretrain 1.x), which also differ in model (zero_init_residual=False)
# and exclude by name; neither published number was measured here.
optim_wrapper = dict(
    type='AmpOptimWrapper',
    loss_scale='dynamic',
    optimizer=dict(type='MoCoV3LARS', lr=9.6, momentum=0.9, weight_decay=1e-6))

# 10 linear warmup epochs, then half-cycle cosine to 0, per iteration
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-4,
        by_epoch=True,
        begin=0,
        end=10,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        T_max=90,
        eta_min=0.,
        by_epoch=True,
        begin=10,
        end=100,
        convert_to_iter_based=True)
]

train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=100)
default_hooks = dict(checkpoint=dict(max_keep_ckpts=3))

# lr 9.6 is for a total batch of 4096 (8 x 512); --auto-scale-lr rescales it
auto_scale_lr = dict(base_batch_size=4096)
