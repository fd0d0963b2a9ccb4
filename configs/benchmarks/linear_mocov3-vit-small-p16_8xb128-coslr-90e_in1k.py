# Linear evaluation of MoCo v3 ViT-Small/16: a linear classifier on the
# frozen backbone's class token (after the final LayerNorm), 8 GPUs x 128
# images (batch 1024), SGD, cosine lr, 90 epochs on ImageNet-1k.
# "An Empirical Study of Training Self-Supervised Vision Transformers"
# (Chen, Xie, He, ICCV 2021, https://arxiv.org/abs/2104.02057); official
# main_lincls.py -a vit_small --lr=3: lr 3 x batch / 256 = 12 at batch 1024,
# momentum 0.9, wd 0, half-cycle cosine per epoch, head init N(0, 0.01),
# backbone frozen.
# Published top-1 (not measured here): 73.2 after 300 pretraining epochs.
#
# The query encoder of a MoCo v3 checkpoint is loaded through `pretrained`
# (the config's runner copies it into the backbone's 'Pretrained' init_cfg):
#   CONFIG=configs/benchmarks/linear_mocov3-vit-small-p16_8xb128-coslr-90e_in1k.py  # noqa: E501
#   tools/dist_train.sh $CONFIG 8 --cfg-options \
#       pretrained=work_dirs/mocov3_vit-small-p16_16xb256-amp-coslr-300e_in1k/epoch_300.pth  # noqa: E501
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs32_pil_resize.py',
    '../_base_/schedules/mocov3_linear_sgd_coslr_90e.py',
    '../_base_/default_runtime.py',
]

# path of the MoCo v3 checkpoint; set with --cfg-options pretrained=PATH
pretrained = None

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='MoCoV3ViT',
        arch='mocov3-small',  # embed 384
        img_size=224,
        patch_size=16,
        stop_grad_conv1=True,
        frozen_stages=12,  # patch/pos embedding, cls token, 12 layers, LN
        norm_eval=True,
        init_cfg=dict(
            type='Pretrained',
            _scope_='mocoplug',  # mocoplug's: all tensors or an error
            checkpoint=pretrained,
            prefix='backbone.')),
    head=dict(
        type='VisionTransformerClsHead',
        num_classes=1000,
        in_channels=384,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='Normal', std=0.01, layer='Linear')))

train_dataloader = dict(batch_size=128)
val_dataloader = dict(batch_size=128)
test_dataloader = val_dataloader

# lr 3 x batch / 256 (main_lincls.py --lr=3): 12 at 8 x 128 = 1024
optim_wrapper = dict(optimizer=dict(lr=12.))

default_hooks = dict(
    checkpoint=dict(type='CheckpointHook', interval=10, max_keep_ckpts=3))
