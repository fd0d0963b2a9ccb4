# The MoCo v2 ImageNet recipe with the views' photometric augmentation
# (colour jitter, grayscale, Gaussian blur) run batched on the model's
# device: data-loader workers only decode, crop and flip (uint8 views), so
# each worker feeds several times more images per second. Same transforms,
# probabilities and ranges (the recipe's own view pipeline, read by both
# halves); values as the per-image Fast* transforms (see
# mocoplug/models/utils/batch_augments/).
#   tools/dist_train.sh \
#       configs/mocov2/mocov2_r50_8xb32-coslr-200e_in1k_device-aug.py 8
# Any config using MultiView + SelfSupDataPreprocessor switches the same
# way: GeometricMultiView in place of MultiView, and this data_preprocessor
# with the same transforms / num_views (mocoplug.utils.
# use_device_augmentation does both).
_base_ = './mocov2_r50_8xb32-coslr-200e_in1k.py'

train_dataloader = dict(
    dataset=dict(pipeline=[
        dict(type='LoadImageFromFile', imdecode_backend='cv2'),
        dict(
            type='mocoplug.GeometricMultiView',
            num_views=2,
            transforms=[{{_base_.view_pipeline}}]),
        dict(type='PackInputs'),
    ]))
data_preprocessor = dict(
    type='mocoplug.DeviceAugmentDataPreprocessor',
    num_views=2,
    transforms=[{{_base_.view_pipeline}}])
