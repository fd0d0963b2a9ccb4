# MoCo v3's MLPs and momentum schedule ("An Empirical Study of Training
# Self-Supervised Vision Transformers", Chen, Xie, He, ICCV 2021; MLPs as
# moco/builder.py _build_mlp): Linear (no bias) - SyncBN - ReLU blocks,
# 4096 hidden, 256 out. The backbone's config completes them: the
# projector's input width, depth (2 layers after a ResNet, 3 after a ViT)
# and pooling; the predictor ends without BN after a ResNet, with an
# affine-free BN after a ViT.
norm_cfg = dict(type='SyncBN')
model = dict(
    type='MoCoV3',
    # projector: in -> 4096 (-> 4096) -> 256, last BN without affine
    neck=dict(
        type='MoCoProjectionNeck',
        hid_channels=4096,
        out_channels=256,
        with_bias=False,
        with_bn=True,
        with_last_bn=True,
        with_last_bn_affine=False,
        norm_cfg=norm_cfg),
    # predictor 256-4096-256 (no last BN: the ResNet's)
    predictor=dict(
        type='MoCoProjectionNeck',
        in_channels=256,
        hid_channels=4096,
        out_channels=256,
        num_layers=2,
        with_bias=False,
        with_bn=True,
        with_last_bn=False,
        norm_cfg=norm_cfg,
        with_avg_pool=False))

# theta_k <- m theta_k + (1 - m) theta_q after every step, m from 0.99 to 1
# on a half-cycle cosine over all iterations (--moco-m 0.99 --moco-m-cos).
custom_hooks = [
    dict(type='MomentumUpdateHook', momentum=0.99, schedule='cosine')
]
