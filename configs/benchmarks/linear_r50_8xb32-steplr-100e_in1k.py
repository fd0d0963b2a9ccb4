# Linear evaluation of a MoCo v1/v2 ResNet-50 on ImageNet-1k, the protocol
# of "Momentum Contrast for Unsupervised Visual Representation Learning"
# (He et al., CVPR 2020): frozen backbone with BN in eval mode, a linear
# classifier on the pooled 2048-d feature (init normal(0, 0.01), bias 0),
# SGD lr 30 momentum 0.9 wd 0, batch 256 (8 x 32), 100 epochs, lr x0.1 at
# epochs 60 and 80; RandomResizedCrop + flip for training, resize 256 /
# centre crop 224 for validation. Published top-1: 60.6 (v1), 67.5 (v2,
# 200 ep), 71.1 (v2, 800 ep).
#   tools/dist_train.sh \
#       configs/benchmarks/linear_r50_8xb32-steplr-100e_in1k.py 8 \
#       --cfg-options pretrained=work_dirs/mocov2_r50_8xb32/epoch_200.pth
_base_ = [
    'mmpretrain::_base_/models/resnet50.py',
    'mmpretrain::_base_/datasets/imagenet_bs32_pil_resize.py',
    'mmpretrain::_base_/schedules/imagenet_sgd_steplr_100e.py',
    '../_base_/default_runtime.py',
]

# The MoCo checkpoint (query encoder's `backbone.*`); set it with
# --cfg-options pretrained=PATH (the config's runner fills the init_cfg below).
pretrained = None

model = dict(
    backbone=dict(
        frozen_stages=4,  # stem + 4 stages: nothing trains, BN in eval mode
        norm_eval=True,
        init_cfg=dict(
            type='Pretrained',
            _scope_='mocoplug',  # mocoplug's: all tensors or an error
            checkpoint=pretrained,
            prefix='backbone.')),
    head=dict(init_cfg=dict(type='Normal', layer='Linear', std=0.01, bias=0.)))

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='SGD', lr=30., momentum=0.9, weight_decay=0.))

default_hooks = dict(
    checkpoint=dict(type='CheckpointHook', interval=10, max_keep_ckpts=3))

auto_scale_lr = dict(base_batch_size=256)
