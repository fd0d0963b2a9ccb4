# MoCo v2 on any folder of unlabeled images (jpg, png, ...; sub-folders are
# searched too), e.g. your own domain data:
#   tools/dist_train.sh configs/mocov2_r50_8xb32-coslr-200e_folder.py 8 \
#       --cfg-options train_dataloader.dataset.data_root=/path/to/images
# On one GPU: python tools/train.py <this config> --cfg-options \
#       train_dataloader.dataset.data_root=/path/to/images \
#       model.shuffle_bn=split
# Everything else is the ImageNet recipe; for a dataset much smaller than
# ImageNet consider fewer epochs, a smaller queue, or
# model.queue.exclude_same_instance=True (see README).
_base_ = './mocov2_r50_8xb32-coslr-200e_in1k.py'

train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='CustomDataset',  # mmpretrain's: scans the folder
        data_root='data/unlabeled_images',
        with_label=False,
        pipeline={{_base_.train_pipeline}}))
