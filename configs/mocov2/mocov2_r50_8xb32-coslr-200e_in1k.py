# MoCo v2, ResNet-50, 8 GPUs x 32 images, cosine lr, 200 epochs, ImageNet-1k.
# "Improved Baselines with Momentum Contrastive Learning" (Chen et al., 2020):
# SGD lr 0.03 (batch 256) momentum 0.9 wd 1e-4, K=65536, tau=0.2, m=0.999.
# Published linear top-1: 67.5 (200 ep).
_base_ = [
    '../_base_/datasets/imagenet_bs32_mocov2.py',
    'mmpretrain::_base_/schedules/imagenet_sgd_coslr_200e.py',
    '../_base_/default_runtime.py',
]

model = dict(
    type='MoCo',
    backbone=dict(
        type='ResNet',
        depth=50,
        norm_cfg=dict(type='BN'),
        zero_init_residual=False),
    neck=dict(
        type='MoCoProjectionNeck',
        in_channels=2048,
        hid_channels=2048,
        out_channels=128,
        num_layers=2),
    head=dict(type='InfoNCEHead', temperature=0.2),
    queue=dict(type='NegativeKeyQueue', size=65536, dim=128),
    # Shuffle BN across the 8 GPUs, as in the paper. On one GPU or CPU use
    # --cfg-options model.shuffle_bn=split (BN over 8 slices of the batch).
    shuffle_bn='ddp',
    num_splits=8)

# theta_k <- m theta_k + (1 - m) theta_q after every step (paper's m)
custom_hooks = [dict(type='MomentumUpdateHook', momentum=0.999)]

default_hooks = dict(checkpoint=dict(max_keep_ckpts=3))

# lr 0.03 is for a total batch of 256 (8 x 32); --auto-scale-lr rescales it
auto_scale_lr = dict(base_batch_size=256)

# The base's SGD as torch's fused kernel: one pass over each parameter
# instead of torch's default per-tensor loop (CPU) or several foreach
# kernels (GPU). On CPU the update equals the default's to float32
# rounding and is 3x faster (tests/configs/test_fused_optimizers.py;
# python tools/benchmarks/benchmark.py train).
optim_wrapper = dict(optimizer=dict(fused=True))
