# MoCo v3, ViT-Base/16, 16 GPUs x 256 images (batch 4096), AMP, cosine lr,
# 300 epochs on ImageNet-1k.
# "An Empirical Study of Training Self-Supervised Vision Transformers"
# (Chen, Xie, He, ICCV 2021, https://arxiv.org/abs/2104.02057) and its code
# (facebookresearch/moco-v3, CONFIG.md "ViT-Base": main_moco.py -a vit_base
# --optimizer=adamw --lr=1.5e-4 --weight-decay=.1 --epochs=300
# --warmup-epochs=40 --stop-grad-conv1 --moco-m-cos --moco-t=.2, batch 4096).
# Published linear top-1 (not measured here): 76.7 (300 ep).
#
# Everything but the backbone's width is the ViT-Small recipe: views, MLPs,
# tau 0.2, AdamW lr 2.4e-3 at batch 4096, wd 0.1, 40 warmup epochs, m 0.99.
#
#   tools/dist_train.sh \
#       configs/mocov3/mocov3_vit-base-p16_16xb256-amp-coslr-300e_in1k.py 16
_base_ = './mocov3_vit-small-p16_16xb256-amp-coslr-300e_in1k.py'

model = dict(
    backbone=dict(arch='base'),  # embed 768, 12 layers, 12 heads
    neck=dict(in_channels=768))  # projector 768-4096-4096-256
