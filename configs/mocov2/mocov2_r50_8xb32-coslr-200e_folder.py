# MoCo v2 on any folder of unlabeled images (jpg, png, ...; sub-folders are
# searched too), e.g. your own domain data:
#   tools/dist_train.sh \
#       configs/mocov2/mocov2_r50_8xb32-coslr-200e_folder.py 8 \
#       --cfg-options train_dataloader.dataset.data_root=/path/to/images
# On one GPU: python tools/train.py <this config> --cfg-options \
#       train_dataloader.dataset.data_root=/path/to/images \
#       model.shuffle_bn=split
# Everything else is the ImageNet recipe; for a dataset much smaller than
# ImageNet consider fewer epochs, a smaller queue, or
# model.queue.exclude_same_instance=True (see README).
#
# Scraped folders hold broken files: check them before a long run with
#   python tools/misc/check_images.py /path/to/images --out bad.txt
# An unreadable image stops training with an error naming it; to skip such
# images instead (with a warning each, stopping if more than 1% fail):
#   --cfg-options train_dataloader.dataset.pipeline.0.skip_unreadable=True
_base_ = './mocov2_r50_8xb32-coslr-200e_in1k.py'

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
