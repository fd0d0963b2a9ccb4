# MoCo v2 on any folder of unlabeled images (jpg, png, ...; sub-folders are
# searched too), e.g. your own domain data, from a few hundred images to
# millions:
#   tools/dist_train.sh \
#       configs/mocov2/mocov2_r50_8xb32-coslr-200e_folder.py 8 \
#       --cfg-options train_dataloader.dataset.data_root=/path/to/images
# On one GPU: python tools/train.py <this config> --cfg-options \
#       train_dataloader.dataset.data_root=/path/to/images \
#       model.shuffle_bn=split
#
# The ImageNet recipe, except what depends on the folder's size. The rules
# (measured on a folder of digits: configs/mocov2/README.md, "Your own
# folder"); before training MoCoConfigCheckHook logs the number of images,
# iterations and queue keys per image, and warns above 4 keys per image:
# - projection neck: BN in the MLP, the last BN without affine (MoCo v3's
#   projector), at any size: on small folders the plain fc-ReLU-fc mapped
#   every image to one vector;
# - lr: 0.03 per 256 images of total batch, scaled to the real total batch
#   when the run starts (auto_scale_lr below, logged);
# - queue: at most 4 keys per image, model.queue.size <= 4 x images (the
#   65536 keys here from 16384 images up), or
#   model.queue.exclude_same_instance=True;
# - schedule: train_cfg.max_epochs (iterations = epochs x images / total
#   batch), with the cosine's T_max and end.
#
# Scraped folders hold broken files: check them before a long run with
#   python tools/misc/check_images.py /path/to/images --out bad.txt
# An unreadable image stops training with an error naming it; to skip such
# images instead (with a warning each, stopping if more than 1% fail):
#   --cfg-options train_dataloader.dataset.pipeline.0.skip_unreadable=True
_base_ = './mocov2_r50_8xb32-coslr-200e_in1k.py'

model = dict(
    neck=dict(
        with_bias=False,
        with_bn=True,
        with_last_bn=True,
        with_last_bn_affine=False))

# The ImageNet recipe's pipeline, loading with mocoplug's checked loader.
# The `mocoplug.` prefix finds it from any scope: mmengine 0.10.7 builds the
# dataset inside the train loop, in the scope of the loop's config
# (mmpretrain's, inherited from its schedule base).
train_pipeline = [
    dict(
        type='mocoplug.CheckedLoadImageFromFile',
        imdecode_backend='cv2',
        skip_unreadable=False,
        max_unreadable_ratio=0.01),
    dict(type='MultiView', num_views=2, transforms=[{{_base_.view_pipeline}}]),
    dict(type='PackInputs'),
]
train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='CustomDataset',  # mmpretrain's: scans the folder
        data_root='data/unlabeled_images',
        with_label=False,
        pipeline=train_pipeline))

# lr 0.03 x (GPUs x batch_size) / 256, applied when the run starts
auto_scale_lr = dict(enable=True)
