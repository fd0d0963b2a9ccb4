# Mask R-CNN R50-FPN fine-tuned from a MoCo checkpoint on COCO, 2x schedule
# (MoCo paper, He et al., CVPR 2020, Table 5): 24 epochs (~180k iterations
# of 16 images), lr divided by 10 after epochs 16 and 22. Everything else
# as the 1x config.
#
#   tools/dist_train.sh \
#       configs/detection/mask-rcnn_r50-fpn_syncbn-ms-2x_coco.py 8 \
#       --cfg-options pretrained=work_dirs/mocov2_r50_8xb32/epoch_200.pth
_base_ = './mask-rcnn_r50-fpn_syncbn-ms-1x_coco.py'

# The MoCo checkpoint: --cfg-options pretrained=PATH (the runner copies
# it into the backbone's 'Pretrained' init_cfg).
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
