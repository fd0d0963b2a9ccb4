# The MoCo v3 ResNet-50 recipe with the views' photometric augmentation
# (colour jitter, grayscale, Gaussian blur, solarize; asymmetric: blur
# prob 1.0 / 0.1, solarize 0 / 0.2) run batched on the model's device;
# data-loader workers only decode, crop and flip. The device computes
# ColorJitter's hue in float HSV and GaussianBlur as a true Gaussian, as
# mocoplug's FastColorJitter / FastGaussianBlur (mmpretrain's PIL versions
# differ from them by less than one grey level on average).
#   tools/dist_train.sh \
#       configs/mocov3/mocov3_r50_8xb512-amp-coslr-100e_in1k_device-aug.py 8
_base_ = './mocov3_r50_8xb512-amp-coslr-100e_in1k.py'

views = [{{_base_.view_pipeline1}}, {{_base_.view_pipeline2}}]
train_dataloader = dict(
    dataset=dict(pipeline=[
        dict(type='LoadImageFromFile'),
        dict(
            type='mocoplug.GeometricMultiView',
            num_views=[1, 1],
            transforms=views),
        dict(type='PackInputs'),
    ]))
data_preprocessor = dict(
    type='mocoplug.DeviceAugmentDataPreprocessor',
    num_views=[1, 1],
    transforms=views)
