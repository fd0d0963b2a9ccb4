# MoCo v3, ViT-Small/16, 16 GPUs x 256 images (batch 4096), AMP, cosine lr,
# 300 epochs on ImageNet-1k.
# "An Empirical Study of Training Self-Supervised Vision Transformers"
# (Chen, Xie, He, ICCV 2021, https://arxiv.org/abs/2104.02057) and its code
# (facebookresearch/moco-v3, CONFIG.md "ViT-Small": main_moco.py -a vit_small
# --optimizer=adamw --lr=1.5e-4 --weight-decay=.1 --epochs=300
# --warmup-epochs=40 --stop-grad-conv1 --moco-m-cos --moco-t=.2, batch 4096,
# crop-min 0.08 by default).
# Published linear top-1 (not measured here): 73.2 (300 ep).
#
#   tools/dist_train.sh \
#       configs/mocov3/mocov3_vit-small-p16_16xb256-amp-coslr-300e_in1k.py 16
_base_ = [
    '../_base_/datasets/imagenet_bs512_mocov3.py',
    '../_base_/models/mocov3.py',
    '../_base_/default_runtime.py',
]

# The two asymmetric views of the official code (BYOL's recipe), with crop
# scale (0.08, 1) for ViT (the dataset base has ResNet's 0.2). The first
# view always blurs and never solarizes; the second is the same with blur
# prob 0.1 and solarize prob 0.2.
view_pipeline1 = [
    dict(
        type='RandomResizedCrop',
        scale=224,
        crop_ratio_range=(0.08, 1.),
        backend='pillow'),
    dict(
        type='RandomApply',
        transforms=[
            dict(
                type='ColorJitter',
                brightness=0.4,
                contrast=0.4,
                saturation=0.2,
                hue=0.1)
        ],
        prob=0.8),
    dict(
        type='RandomGrayscale',
        prob=0.2,
        keep_channels=True,
        channel_weights=(0.114, 0.587, 0.2989)),
    dict(
        type='GaussianBlur',
        magnitude_range=(0.1, 2.0),
        magnitude_std='inf',
        prob=1.),
    dict(type='Solarize', thr=128, prob=0.),
    dict(type='RandomFlip', prob=0.5),
]
view_pipeline2 = view_pipeline1[:3] + [
    dict(view_pipeline1[3], prob=0.1),  # GaussianBlur
    dict(view_pipeline1[4], prob=0.2),  # Solarize
] + view_pipeline1[5:]
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='MultiView',
        num_views=[1, 1],
        transforms=[view_pipeline1, view_pipeline2]),
    dict(type='PackInputs')
]
train_dataloader = dict(batch_size=256, dataset=dict(pipeline=train_pipeline))

temperature = 0.2
model = dict(
    # mmpretrain's MoCoV3ViT: frozen random patch projection
    # (stop_grad_conv1), fixed 2-D sin-cos position embedding; the class
    # token after the final LayerNorm is the feature.
    backbone=dict(
        type='MoCoV3ViT',
        arch='mocov3-small',  # embed 384, 12 layers, 12 heads
        img_size=224,
        patch_size=16,
        stop_grad_conv1=True),
    # projector 384-4096-4096-256 on the class token
    neck=dict(in_channels=384, num_layers=3, with_avg_pool=False),
    # for ViT the predictor ends with an affine-free BN too
    predictor=dict(with_last_bn=True, with_last_bn_affine=False),
    head=dict(
        type='InfoNCEHead',
        temperature=temperature,
        loss=dict(type='CrossEntropyLoss', loss_weight=2 * temperature)))

# AdamW, lr 1.5e-4 x 4096 / 256 = 2.4e-3, wd 0.1 on all parameters. The
# official code uses torch.optim.AdamW's default betas (0.9, 0.999).
# fused: torch's one-kernel AdamW (works with the AMP loss scaler; on CPU
# 5x faster than the default loop, equal to float32 round-off).
optim_wrapper = dict(
    type='AmpOptimWrapper',
    loss_scale='dynamic',
    optimizer=dict(
        type='AdamW',
        lr=2.4e-3,
        betas=(0.9, 0.999),
        weight_decay=0.1,
        fused=True))

# 40 linear warmup epochs, then half-cycle cosine to 0, per iteration
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-4,
        by_epoch=True,
        begin=0,
        end=40,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        T_max=260,
        eta_min=0.,
        by_epoch=True,
        begin=40,
        end=300,
        convert_to_iter_based=True)
]

train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=300)
default_hooks = dict(checkpoint=dict(max_keep_ckpts=3))

# lr 2.4e-3 is for a total batch of 4096 (16 x 256); --auto-scale-lr
# rescales it
auto_scale_lr = dict(base_batch_size=4096)

# MoCoV3ViT.init_weights freezes the fixed sin-cos position embedding after
# the Runner has wrapped the model in DDP, which then waits for its gradient
# at the second step of any run on 2+ GPUs (tests/test_path_matrix.py);
# mmpretrain's ViT configs set the same.
find_unused_parameters = True
