# Mask R-CNN R50-FPN fine-tuned from a MoCo checkpoint on COCO train2017,
# tested on val2017, 1x schedule: the COCO transfer of "Momentum Contrast
# for Unsupervised Visual Representation Learning" (He et al., CVPR 2020,
# Sec. 4.2, Table 5: "SyncBN in the backbone and in FPN/heads"), i.e.
# detectron2's SyncBN Mask R-CNN (norm in FPN, a 4conv1fc box head and the
# mask head) with multi-scale training, as mmselfsup's benchmark.
#
#   tools/dist_train.sh \
#       configs/detection/mask-rcnn_r50-fpn_syncbn-ms-1x_coco.py 8 \
#       --cfg-options pretrained=work_dirs/mocov2_r50_8xb32/epoch_200.pth
#
# Published (not measured here), MoCo v2 200 ep with this model in
# mmselfsup: box AP 40.2, mask AP 36.1.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]

# The MoCo checkpoint: --cfg-options pretrained=PATH. The runner copies
# it into the backbone's 'Pretrained' init_cfg, which loads the query
# encoder (`backbone.*`), never the momentum encoder.
pretrained = None

custom_imports = dict(
    imports=['mocoplug', 'mocoplug.detection'], allow_failed_imports=False)
# mocoplug's runner (mocoplug/engine/runner/moco_runner.py), as in
# configs/_base_/default_runtime.py: it copies `pretrained` into the
# init_cfgs below. Scope-qualified: this config's default scope is mmdet's.
runner_type = 'mocoplug.MoCoRunner'

norm_cfg = dict(type='SyncBN', requires_grad=True)
model = dict(
    # torchvision-style input of the MoCo encoders: RGB, ImageNet mean/std
    data_preprocessor=dict(
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True),
    backbone=dict(
        frozen_stages=-1,  # every stage is fine-tuned
        norm_cfg=norm_cfg,
        norm_eval=False,
        style='pytorch',
        init_cfg=dict(
            _delete_=True,
            type='Pretrained',
            _scope_='mocoplug',  # mocoplug's: all tensors or an error
            checkpoint=pretrained,
            prefix='backbone.')),
    neck=dict(norm_cfg=norm_cfg),
    roi_head=dict(
        bbox_head=dict(type='Shared4Conv1FCBBoxHead', norm_cfg=norm_cfg),
        mask_head=dict(norm_cfg=norm_cfg)))

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
    batch_size=2,  # x 8 GPUs = 16 images per iteration
    dataset=dict(pipeline=train_pipeline))

# Schedule 1x: 12 epochs, lr 0.02 divided by 10 after epochs 8 and 11,
# 1000 warm-up iterations (detectron2's WARMUP_ITERS; mmdet's 1x uses 500).
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

# mocoplug's checks on mmdet's runtime (in mmdet's tools too): the total
# batch against this 8 x 2 recipe, before the first step (--auto-scale-lr
# scales the lr), and a stop at the first non-finite loss
default_hooks = dict(
    checkpoint=dict(max_keep_ckpts=3),
    config_check=dict(type='MoCoConfigCheckHook'),
    non_finite_loss=dict(type='NonFiniteLossHook'))
