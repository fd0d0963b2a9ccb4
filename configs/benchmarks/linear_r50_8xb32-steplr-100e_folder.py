# Linear evaluation of a MoCo ResNet-50 on your own labelled images: the
# protocol of linear_r50_8xb32-steplr-100e_in1k.py (frozen backbone, SGD
# lr 30, 100 epochs, steps at 60/80) on a folder in mmpretrain's
# CustomDataset layout, one sub-folder per class in each split:
#   /path/to/folder/train/<class>/*.png   /path/to/folder/val/<class>/*.png
#   tools/dist_train.sh \
#       configs/benchmarks/linear_r50_8xb32-steplr-100e_folder.py 8 \
#       --cfg-options pretrained=work_dirs/mocov2_r50_8xb32/epoch_200.pth \
#       data_root=/path/to/folder
# The config's runner (MoCoRunner) gives `data_root` to the datasets below
# and take the number of classes from the class folders (the head's
# num_classes is left None here). Only top-1 is reported; add top-5 with
# --cfg-options "val_evaluator.topk=(1,5)" "test_evaluator.topk=(1,5)"
# when there are more than 5 classes. For a small dataset, consider fewer
# epochs (train_cfg.max_epochs, param_scheduler.milestones) and a smaller
# batch; the lr scales with --auto-scale-lr.
_base_ = './linear_r50_8xb32-steplr-100e_in1k.py'

data_root = None  # --cfg-options data_root=/path/to/folder

model = dict(
    head=dict(
        type='mocoplug.FolderLinearClsHead',  # num_classes None: clear error
        num_classes=None,
        topk=(1, )))

train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='CustomDataset',  # mmpretrain's: class = sub-folder name
        data_root=None,  # filled from `data_root`
        data_prefix='train',
        with_label=True,
        pipeline={{_base_.train_pipeline}}))
val_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='CustomDataset',
        data_root=None,
        data_prefix='val',
        with_label=True,
        pipeline={{_base_.test_pipeline}}))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_evaluator = val_evaluator
