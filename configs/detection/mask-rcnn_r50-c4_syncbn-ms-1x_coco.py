# Mask R-CNN R50-C4 fine-tuned from a MoCo checkpoint on COCO train2017,
# tested on val2017, 1x schedule: the COCO transfer of "Momentum Contrast
# for Unsupervised Visual Representation Learning" (He et al., CVPR 2020,
# Sec. 4.2, Table 5). facebookresearch/moco releases the 2x config
# (detection/configs/coco_R_50_C4_2x_moco.yaml + Base-RCNN-C4-BN.yaml);
# this is the same with detectron2's 1x length (90k iterations of 16
# images, ~12 epochs). Published figures: the MoCo paper, Table 5.
#
#   tools/dist_train.sh \
#       configs/detection/mask-rcnn_r50-c4_syncbn-ms-1x_coco.py 8 \
#       --cfg-options pretrained=work_dirs/mocov2_r50_8xb32/epoch_200.pth
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50-caffe-c4.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]

# The MoCo checkpoint: --cfg-options pretrained=PATH. The runner copies
# it into the two 'Pretrained' init_cfgs below (res2-res4 backbone and
# the res5 shared head), which load the query encoder (`backbone.*`).
pretrained = None

custom_imports = dict(
    imports=['mocoplug', 'mocoplug.detection'], allow_failed_imports=False)
# mocoplug's runner (mocoplug/engine/runner/moco_runner.py), as in
# configs/_base_/default_runtime.py: it copies `pretrained` into the
# init_cfgs below. Scope-qualified: this config's default scope is mmdet's.
runner_type = 'mocoplug.MoCoRunner'

# SyncBN in the backbone and in res5 + its extra norm (the C4 heads; the
# RPN and the mask head have no norm layer), trained, as Base-RCNN-C4-BN.
norm_cfg = dict(type='SyncBN', requires_grad=True)
model = dict(
    # torchvision-style input of the MoCo encoders: RGB, ImageNet mean/std
    data_preprocessor=dict(
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True),
    backbone=dict(
        frozen_stages=-1,  # FREEZE_AT: 0
        norm_cfg=norm_cfg,
        norm_eval=False,
        style='pytorch',  # STRIDE_IN_1X1: False
        init_cfg=dict(
            _delete_=True,
            type='Pretrained',
            _scope_='mocoplug',  # mocoplug's: all tensors or an error
            checkpoint=pretrained,
            prefix='backbone.',
            unread=['layer4.'])),  # res5: the shared head's
    roi_head=dict(
        # res5 + extra norm (detectron2 Res5ROIHeadsExtraNorm)
        shared_head=dict(
            type='ResLayerExtraNorm',
            norm_cfg=norm_cfg,
            norm_eval=False,
            style='pytorch',
            init_cfg=dict(
                type='Pretrained',
                _scope_='mocoplug',  # mocoplug's: all tensors or an error
                checkpoint=pretrained,
                prefix='backbone.',
                # res2-res4 are the backbone's; the extra norm is new
                unread=['conv1.', 'bn1.', 'layer1.', 'layer2.', 'layer3.'],
                keep_init=['norm.']))),
    # detectron2 keeps anchors crossing the image border (BOUNDARY_THRESH -1)
    train_cfg=dict(rpn=dict(allowed_border=-1)))

# Data: shorter side sampled from (640, 672, ..., 800), test at 800.
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(
        type='RandomChoiceResize',
        scales=[(1333, s) for s in range(640, 801, 32)],
        keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
train_dataloader = dict(
    batch_size=2,  # x 8 GPUs = IMS_PER_BATCH 16
    dataset=dict(pipeline=train_pipeline))

# Schedule 1x: 12 epochs, lr 0.02 divided by 10 after epochs 8 and 11
# (~60k/80k of detectron2's 90k iterations), 1000 warm-up iterations
# (detectron2's WARMUP_ITERS; mmdet's 1x uses 500).
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
        end=1000),
    dict(
        type='MultiStepLR',
        begin=0,
        end=12,
        by_epoch=True,
        milestones=[8, 11],
        gamma=0.1)
]
optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.02, momentum=0.9, weight_decay=1e-4),
    # detectron2's SOLVER.WEIGHT_DECAY_NORM = 0: no decay on norm layers
    paramwise_cfg=dict(norm_decay_mult=0.))

# TEST.PRECISE_BN of Base-RCNN-C4-BN.yaml: before every evaluation (each
# epoch, train_cfg.val_interval), replace the BN running statistics by
# their average over 200 training batches.
custom_hooks = [dict(type='DetectionPreciseBNHook', num_iters=200, interval=1)]
# mocoplug's checks on mmdet's runtime (in mmdet's tools too): the total
# batch against this 8 x 2 recipe, before the first step (--auto-scale-lr
# scales the lr), and a stop at the first non-finite loss
default_hooks = dict(
    checkpoint=dict(max_keep_ckpts=3),
    config_check=dict(type='MoCoConfigCheckHook'),
    non_finite_loss=dict(type='NonFiniteLossHook'))
