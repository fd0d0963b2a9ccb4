# Mask R-CNN R50-C4 fine-tuned from a MoCo checkpoint on COCO, 2x schedule:
# facebookresearch/moco detection/configs/coco_R_50_C4_2x_moco.yaml
# (180k iterations of 16 images, lr steps at 120k and 160k) as 24 epochs
# with steps after epochs 16 and 22. Everything else as the 1x config.
# Published figures: the MoCo paper (He et al., CVPR 2020), Table 5.
#
#   tools/dist_train.sh \
#       configs/detection/mask-rcnn_r50-c4_syncbn-ms-2x_coco.py 8 \
#       --cfg-options pretrained=work_dirs/mocov2_r50_8xb32/epoch_200.pth
_base_ = './mask-rcnn_r50-c4_syncbn-ms-1x_coco.py'

# The MoCo checkpoint: --cfg-options pretrained=PATH (the runner copies
# it into the 'Pretrained' init_cfgs of the backbone and the shared head).
pretrained = None

max_epochs = 24
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
        end=1000),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[16, 22],
        gamma=0.1)
]
