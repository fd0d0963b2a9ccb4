# Faster R-CNN R50-C4 fine-tuned from a MoCo checkpoint on VOC07+12
# trainval, tested on VOC07 test: the detection transfer of "Momentum
# Contrast for Unsupervised Visual Representation Learning" (He et al.,
# CVPR 2020, Sec. 4.2) as released in facebookresearch/moco
# detection/configs/pascal_voc_R_50_C4_24k_moco.yaml (+ Base-RCNN-C4-BN.yaml).
#
#   tools/dist_train.sh \
#       configs/detection/faster-rcnn_r50-c4_syncbn-ms-24k_voc0712.py 8 \
#       --cfg-options pretrained=work_dirs/mocov2_r50_8xb32/epoch_200.pth
#
# Published (not measured here), MoCo v2 200 ep ("Improved Baselines with
# Momentum Contrastive Learning", Table 1): AP50 82.4, AP 57.0, AP75 63.6.
#
# Differences from detectron2 that remain: mmdet's VOCDataset ignores
# "difficult" boxes in training (detectron2 trains on them), and SyncBN is
# torch's SyncBatchNorm (the MoCo configs use detectron2's naiveSyncBN).
_base_ = [
    'mmdet::_base_/models/faster-rcnn_r50-caffe-c4.py',
    'mmdet::_base_/datasets/voc0712.py',
    'mmdet::_base_/default_runtime.py',
]

# The MoCo checkpoint (mocoplug's, mmpretrain's or mmselfsup's MoCo
# pretraining output). Give it on the command line: --cfg-options
# pretrained=PATH. The runner copies it into the two 'Pretrained'
# init_cfgs below (res2-res4 backbone and the res5 shared head), which load
# the query encoder (`backbone.*`), never the momentum encoder.
pretrained = None

custom_imports = dict(
    imports=['mocoplug', 'mocoplug.detection'], allow_failed_imports=False)
# mocoplug's runner (mocoplug/engine/runner/moco_runner.py), as in
# configs/_base_/default_runtime.py: it copies `pretrained` into the
# init_cfgs below. Scope-qualified: this config's default scope is mmdet's.
runner_type = 'mocoplug.MoCoRunner'

# SyncBN everywhere, trained (not frozen), as in Base-RCNN-C4-BN.yaml.
norm_cfg = dict(type='SyncBN', requires_grad=True)
model = dict(
    # MoCo encoders are torchvision-style: RGB input, ImageNet mean/std
    # (PIXEL_MEAN/PIXEL_STD/FORMAT of the *_moco.yaml configs).
    data_preprocessor=dict(
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True),
    backbone=dict(
        frozen_stages=-1,  # FREEZE_AT: 0, every stage is fine-tuned
        norm_cfg=norm_cfg,
        norm_eval=False,
        style='pytorch',  # stride in the 3x3 conv (STRIDE_IN_1X1: False)
        init_cfg=dict(
            _delete_=True,
            type='Pretrained',
            _scope_='mocoplug',  # mocoplug's: all tensors or an error
            checkpoint=pretrained,
            prefix='backbone.',
            unread=['layer4.'])),  # res5: the shared head's
    roi_head=dict(
        # res5 followed by an extra norm (detectron2 Res5ROIHeadsExtraNorm,
        # mmpretrain's ResLayerExtraNorm registered in mmdet's MODELS)
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
                keep_init=['norm.'])),
        bbox_head=dict(num_classes=20)),
    # detectron2 keeps anchors crossing the image border (BOUNDARY_THRESH -1)
    train_cfg=dict(rpn=dict(allowed_border=-1)))

# Data: shorter side sampled from (480, 512, ..., 800), test at 800.
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(
        type='RandomChoiceResize',
        scales=[(1333, s) for s in range(480, 801, 32)],
        keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                   'scale_factor'))
]

data_root = 'data/VOCdevkit/'
voc_trainval = dict(
    type='VOCDataset',
    data_root=data_root,
    # detectron2 drops images without annotations, keeps small boxes
    filter_cfg=dict(filter_empty_gt=True, min_size=32),
    pipeline=train_pipeline)
train_dataloader = dict(
    batch_size=2,  # x 8 GPUs = IMS_PER_BATCH 16
    num_workers=2,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        _delete_=True,
        type='ConcatDataset',
        # the two VOCDatasets differ in metainfo['dataset_type']
        ignore_keys=['dataset_type'],
        datasets=[
            dict(
                **voc_trainval,
                ann_file='VOC2007/ImageSets/Main/trainval.txt',
                data_prefix=dict(sub_data_root='VOC2007/')),
            dict(
                **voc_trainval,
                ann_file='VOC2012/ImageSets/Main/trainval.txt',
                data_prefix=dict(sub_data_root='VOC2012/')),
        ]))
val_dataloader = dict(
    dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader

# detectron2's PascalVOCDetectionEvaluator reports AP50 (the VOC07 metric),
# AP75 and AP = the mean of the VOC07 11-point AP over IoU 0.50:0.05:0.95.
# VOCMetric computes the 11-point mAP at each threshold (pascal_voc/AP50,
# pascal_voc/AP55, ..., pascal_voc/AP95) and their mean as pascal_voc/mAP,
# which is therefore detectron2's "AP" (not the AP50 it is in mmdet's
# single-threshold VOC configs).
val_evaluator = dict(
    type='VOCMetric',
    metric='mAP',
    eval_mode='11points',
    iou_thrs=[0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95])
test_evaluator = val_evaluator

# Schedule: 24k iterations of 16 images, lr 0.02 divided by 10 at 18k and
# 22k, 100 warm-up iterations; evaluated once, at the end (EVAL_PERIOD 0).
max_iters = 24000
train_cfg = dict(
    type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=100),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_iters,
        by_epoch=False,
        milestones=[18000, 22000],
        gamma=0.1)
]
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='SGD', lr=0.02, momentum=0.9, weight_decay=1e-4),
    # detectron2's SOLVER.WEIGHT_DECAY_NORM = 0: no decay on norm layers
    paramwise_cfg=dict(norm_decay_mult=0.))
auto_scale_lr = dict(enable=False, base_batch_size=16)

# TEST.PRECISE_BN of Base-RCNN-C4-BN.yaml: before evaluating, replace the
# BN running statistics by their average over 200 training batches.
custom_hooks = [
    dict(type='DetectionPreciseBNHook', num_iters=200, interval=max_iters)
]
# mocoplug's checks on mmdet's runtime (in mmdet's tools too): the total
# batch against this 8 x 2 recipe, before the first step (--auto-scale-lr
# scales the lr), and a stop at the first non-finite loss
default_hooks = dict(
    checkpoint=dict(by_epoch=False, interval=4000, max_keep_ckpts=3),
    config_check=dict(type='MoCoConfigCheckHook'),
    non_finite_loss=dict(type='NonFiniteLossHook'))
log_processor = dict(by_epoch=False)
