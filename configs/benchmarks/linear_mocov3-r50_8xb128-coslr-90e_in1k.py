# Linear evaluation of MoCo v3 ResNet-50: a linear classifier on the frozen
# backbone's pooled 2048-d feature, 8 GPUs x 128 images (batch 1024), SGD,
# cosine lr, 90 epochs on ImageNet-1k.
# "An Empirical Study of Training Self-Supervised Vision Transformers"
# (Chen, Xie, He, ICCV 2021, https://arxiv.org/abs/2104.02057); official
# main_lincls.py: SGD lr 0.1 x batch / 256 (0.4 at 1024), momentum 0.9,
# wd 0, half-cycle cosine per epoch, fc init N(0, 0.01), backbone frozen and
# in eval mode (BN statistics untouched).
# Published top-1 (not measured here): 68.9 after 100 pretraining epochs,
# 72.8 after 300.
#
# The query encoder of a MoCo v3 checkpoint is loaded through `pretrained`
# (the config's runner copies it into the backbone's 'Pretrained' init_cfg):
#   tools/dist_train.sh \
#       configs/benchmarks/linear_mocov3-r50_8xb128-coslr-90e_in1k.py 8 \
#       --cfg-options pretrained=work_dirs/mocov3_r50_8xb512-amp-coslr-100e_in1k/epoch_100.pth  # noqa: E501
_base_ = [
    'mmpretrain::_base_/models/resnet50.py',
    'mmpretrain::_base_/datasets/imagenet_bs32_pil_resize.py',
    '../_base_/schedules/mocov3_linear_sgd_coslr_90e.py',
    '../_base_/default_runtime.py',
]

# path of the MoCo v3 checkpoint; set with --cfg-options pretrained=PATH
pretrained = None

model = dict(
    backbone=dict(
        frozen_stages=4,  # stem and the 4 stages: no gradient, eval mode
        norm_eval=True,
        init_cfg=dict(
            type='Pretrained',
            _scope_='mocoplug',  # mocoplug's: all tensors or an error
            checkpoint=pretrained,
            prefix='backbone.')))
# the base's LinearClsHead (2048 -> 1000) is initialised N(0, 0.01), bias 0

train_dataloader = dict(batch_size=128)
val_dataloader = dict(batch_size=128)
test_dataloader = val_dataloader

default_hooks = dict(
    checkpoint=dict(type='CheckpointHook', interval=10, max_keep_ckpts=3))
