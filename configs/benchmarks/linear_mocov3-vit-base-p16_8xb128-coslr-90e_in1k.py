# Linear evaluation of MoCo v3 ViT-Base/16: a linear classifier on the
# frozen backbone's class token (after the final LayerNorm), 8 GPUs x 128
# images (batch 1024), SGD, cosine lr, 90 epochs on ImageNet-1k.
# "An Empirical Study of Training Self-Supervised Vision Transformers"
# (Chen, Xie, He, ICCV 2021, https://arxiv.org/abs/2104.02057); official
# main_lincls.py -a vit_base --lr=3: lr 3 x batch / 256 = 12 at batch 1024,
# momentum 0.9, wd 0, half-cycle cosine per epoch, head init N(0, 0.01),
# backbone frozen.
# Published top-1 (not measured here): 76.7 after 300 pretraining epochs.
#
# The query encoder of a MoCo v3 checkpoint is loaded through `pretrained`
# (the config's runner copies it into the backbone's 'Pretrained' init_cfg):
#   CONFIG=configs/benchmarks/linear_mocov3-vit-base-p16_8xb128-coslr-90e_in1k.py  # noqa: E501
#   tools/dist_train.sh $CONFIG 8 --cfg-options \
#       pretrained=work_dirs/mocov3_vit-base-p16_16xb256-amp-coslr-300e_in1k/epoch_300.pth  # noqa: E501
_base_ = './linear_mocov3-vit-small-p16_8xb128-coslr-90e_in1k.py'

model = dict(
    backbone=dict(arch='base'),  # embed 768
    head=dict(in_channels=768))
