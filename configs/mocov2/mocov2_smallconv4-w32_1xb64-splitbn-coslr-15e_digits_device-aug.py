# The digits demo with the views' contrast jitter and blur run batched on
# the model's device (here the CPU); the workers keep the random affine.
# The device blur is a true Gaussian (mocoplug's FastGaussianBlur), where
# the per-image recipe uses mmpretrain's PIL box approximation.
#   python tools/train.py \
#       configs/mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits_device-aug.py  # noqa: E501
#   python tools/demo.py --device-augment
_base_ = './mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py'

train_dataloader = dict(
    dataset=dict(pipeline=[
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
