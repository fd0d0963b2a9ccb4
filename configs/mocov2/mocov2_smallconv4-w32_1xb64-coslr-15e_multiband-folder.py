# The folder recipe for images of any number of bands and any bit depth
# (multispectral tiles, 16-bit scans): the digits-folder CPU sizes, the
# files decoded as they are (tifffile for TIFF, cv2's unchanged decode for
# PNG), SSL4EO-S12's MoCo v2 views for N bands (Wang et al., 2022: crop,
# brightness/contrast, band-mean grayscale, blur, flip; their random band
# drop is not here), one mean and std per band in the files' value range.
# Set the bands and the statistics of your folder:
#   python tools/analysis_tools/band_stats.py /path/to/images
# prints the --cfg-options for data_preprocessor.mean/std and
# model.backbone.in_channels (configs/mocov2/README.md, "Bands and bit
# depth").
_base_ = './mocov2_smallconv4-w32_1xb64-coslr-15e_digits-folder.py'

bands = 4
data_preprocessor = dict(
    _delete_=True,
    type='mocoplug.BandDataPreprocessor',
    mean=[32767.5] * bands,  # a uniform 16-bit band's: set your folder's
    std=[18918.6] * bands)
model = dict(backbone=dict(in_channels=bands))

view_pipeline = [
    dict(
        type='RandomResizedCrop',
        scale=32,
        crop_ratio_range=(0.2, 1.),
        backend='cv2'),
    dict(type='mocoplug.BandJitter', brightness=0.4, contrast=0.4, prob=0.8),
    dict(type='mocoplug.BandMeanGrayscale', prob=0.2),
    dict(
        type='mocoplug.FastGaussianBlur',
        magnitude_range=(0.1, 2.0),
        magnitude_std='inf',
        prob=0.5),
    dict(type='RandomFlip', prob=0.5),
]
train_dataloader = dict(
    dataset=dict(
        data_root='data/bands',
        pipeline=[
            dict(
                type='mocoplug.CheckedLoadImageFromFile',
                imdecode_backend='tifffile',
                color_type='unchanged'),
            dict(type='MultiView', num_views=2, transforms=[view_pipeline]),
            dict(type='PackInputs'),
        ]))
