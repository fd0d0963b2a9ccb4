# The MoCo v2 ImageNet recipe decoding and cropping on the model's device
# too: data-loader workers only read the files and draw each view's crop box
# and flip (from the JPEG header's size); the device decodes the batch
# (torchvision.io.decode_jpeg: nvjpeg on CUDA, libjpeg-turbo on CPU),
# crops, resizes (antialiased bilinear, as PIL), flips and augments as
# mocov2_r50_8xb32-coslr-200e_in1k_device-aug.py.
#   tools/dist_train.sh \
#       configs/mocov2/mocov2_r50_8xb32-coslr-200e_in1k_device-decode.py 8
_base_ = './mocov2_r50_8xb32-coslr-200e_in1k_device-aug.py'

train_dataloader = dict(
    dataset=dict(pipeline=[
        dict(type='mocoplug.LoadImageBytes'),
        dict(
            type='mocoplug.CropBoxMultiView',
            num_views=2,
            transforms=[{{_base_.view_pipeline}}]),
        dict(type='mocoplug.PackEncodedViews'),
    ]))
