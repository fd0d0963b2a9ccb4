# Copyright (c) mocoplug contributors. All rights reserved.
"""The workers' half of the device augmentation path: the split of a view
pipeline, GeometricMultiView, and reading files for decoding on the
device (LoadImageBytes, CropBoxMultiView, PackEncodedViews)."""
import cv2
import mmcv
import numpy as np
import pytest
import torch
from mmengine.dataset import default_collate
from mmengine.registry import DefaultScope
from PIL import Image

from mocoplug.datasets.transforms import (CropBoxMultiView, LoadImageBytes,
                                          PackEncodedViews)
from mocoplug.datasets.transforms.antialiased_resized_crop import \
    antialiased_resized_crop
from mocoplug.datasets.transforms.view_pipeline_split import \
    split_view_pipeline
from mocoplug.registry import TRANSFORMS
from .photo import photo_crop

CROP = dict(
    type='RandomResizedCrop',
    scale=24,
    crop_ratio_range=(0.2, 1.),
    backend='pillow')
JITTER = dict(
    type='RandomApply',
    transforms=[
        dict(
            type='mocoplug.FastColorJitter',
            brightness=0.4,
            contrast=0.4,
            saturation=0.4,
            hue=0.1)
    ],
    prob=0.8)
GREY = dict(type='RandomGrayscale', prob=0.2)
BLUR = dict(
    type='GaussianBlur',
    magnitude_range=(0.1, 2.0),
    magnitude_std='inf',
    prob=0.5)
FLIP = dict(type='RandomFlip', prob=0.5)
V2 = [CROP, JITTER, GREY, BLUR, FLIP]


def test_split_keeps_order_and_scope_prefixes():
    worker, device = split_view_pipeline(V2 + [dict(type='Solarize', thr=1)])
    assert worker == [CROP, FLIP]
    assert [d['type'] for d in device] == [
        'RandomApply', 'RandomGrayscale', 'GaussianBlur', 'Solarize'
    ]
    digits = [
        dict(type='NumpyToPIL'),
        dict(type='torchvision/RandomAffine', degrees=20),
        dict(type='PILToNumpy'),
        dict(type='mmpretrain.ColorJitter', contrast=0.5), BLUR
    ]
    assert len(split_view_pipeline(digits)[0]) == 3


@pytest.mark.parametrize('pipeline,message', [
    ([CROP, dict(type='Posterize', bits=4)], r'step 1 \(Posterize\)'),
    ([CROP, dict(type='RandomApply', transforms=[GREY])
      ], 'only around one ColorJitter'),
    ([CROP, BLUR, dict(type='CenterCrop', crop_size=8)
      ], r'step 2 \(CenterCrop\) comes after the photometric step'),
])
def test_split_refuses_what_it_cannot_move(pipeline, message):
    with pytest.raises(ValueError, match=message):
        split_view_pipeline(pipeline)


def build(cfg):
    with DefaultScope.overwrite_default_scope('mocoplug'):
        return TRANSFORMS.build(cfg)


def test_geometric_multi_view_is_multi_view_without_photometric_steps():
    """Views other than a PIL-backed crop + flip run the configured
    transforms: here a cv2-backed crop."""
    img = photo_crop(60, 80, seed=1)
    crop = dict(CROP, backend='cv2')
    view = [crop, JITTER, GREY, BLUR, FLIP]
    ours = build(
        dict(
            type='GeometricMultiView',
            num_views=[1, 2],
            transforms=[view, view]))
    assert ours.fast_views is None
    ref = build(
        dict(
            type='MultiView',
            num_views=[1, 2],
            transforms=[[crop, FLIP], [crop, FLIP]]))
    np.random.seed(5)
    got = ours(dict(img=img.copy()))['img']
    np.random.seed(5)
    want = ref(dict(img=img.copy()))['img']
    assert len(got) == 3
    for a, b in zip(got, want):
        assert a.dtype == np.uint8 and a.shape == (24, 24, 3)
        np.testing.assert_array_equal(a, b)


def jpeg_file(tmp_path, img_rgb, orientation=1, name='a.jpg'):
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / name
    Image.fromarray(img_rgb).save(
        path, 'JPEG', quality=90, exif=exif.tobytes())
    return str(path)


@pytest.mark.parametrize('orientation', range(1, 9))
def test_load_image_bytes_size_is_the_oriented_decoded_size(
        tmp_path, orientation):
    path = jpeg_file(tmp_path, photo_crop(30, 50)[..., ::-1], orientation)
    out = LoadImageBytes()(dict(img_path=path))
    decoded = mmcv.imread(path, backend='cv2')  # applies the orientation
    assert out['img_shape'] == decoded.shape[:2]
    assert out['exif_orientation'] == orientation
    assert out['img_bytes'] == open(path, 'rb').read()


def test_load_image_bytes_names_an_unreadable_file(tmp_path):
    from mocoplug.datasets.image_check import UnreadableImageError
    bad = tmp_path / 'bad.jpg'
    bad.write_bytes(b'not an image')
    with pytest.raises(UnreadableImageError, match='bad.jpg'):
        LoadImageBytes()(dict(img_path=str(bad)))


def test_crop_boxes_are_random_resized_crops_draws():
    """The same NumPy draws as RandomResizedCrop and RandomFlip."""
    crops = CropBoxMultiView(transforms=[[CROP, JITTER, FLIP]], num_views=2)
    np.random.seed(3)
    out = crops(dict(img_shape=(300, 500)))
    crop, flip = build(CROP), build(FLIP)
    np.random.seed(3)
    for view in range(2):
        box = crop.rand_crop_params(np.empty((300, 500, 0)))
        assert out['crop_boxes'][view].tolist() == list(box)
        assert out['flips'][view] == (flip._choose_direction() == 'horizontal')
    assert out['crop_boxes'].dtype == np.int64


def test_crop_box_multi_view_refuses_other_geometry():
    with pytest.raises(ValueError, match='RandomResizedCrop, an optional'):
        CropBoxMultiView(
            transforms=[[dict(type='NumpyToPIL'), CROP]], num_views=2)
    with pytest.raises(ValueError, match='only horizontal flips'):
        CropBoxMultiView(
            transforms=[[CROP, dict(FLIP, direction='vertical')]], num_views=2)


def test_pack_encoded_views_collates(tmp_path):
    paths = [
        jpeg_file(tmp_path, photo_crop(40, 60, s), name=f'{s}.jpg')
        for s in range(3)
    ]
    steps = [
        LoadImageBytes(),
        CropBoxMultiView(transforms=[V2], num_views=2),
        PackEncodedViews()
    ]
    samples = []
    for i, path in enumerate(paths):
        results = dict(img_path=path, sample_idx=i)
        for step in steps:
            results = step(results)
        samples.append(results)
    batch = default_collate(samples)
    inputs = batch['inputs']
    assert [len(b) for b in inputs['encoded']
            ] == [len(open(p, 'rb').read()) for p in paths]
    assert inputs['crop_boxes'].shape == (3, 2, 4)
    assert inputs['flips'].shape == (3, 2)
    assert inputs['exif_orientation'].tolist() == [1, 1, 1]
    assert [d.sample_idx for d in batch['data_samples']] == [0, 1, 2]
    with pytest.raises(KeyError, match='crop_boxes'):
        PackEncodedViews()(dict(img_bytes=b'', flips=[], exif_orientation=1))


def test_decoding_on_the_cpu_equals_opencv(tmp_path):
    """The device path's decoder on the CPU (libjpeg-turbo through
    torchvision) gives OpenCV's pixels for JPEGs from OpenCV and from PIL,
    any EXIF orientation; PNGs go through torchvision's decode_image."""
    from mocoplug.models.utils.batch_augments.decode_resized_crop import (
        apply_exif_orientation, decode_images)
    img = photo_crop(48, 64, seed=2)
    files = [cv2.imencode('.jpg', img)[1].tobytes()]
    for orientation in range(1, 9):
        path = jpeg_file(tmp_path, img[..., ::-1], orientation)
        files.append(open(path, 'rb').read())
    files.append(cv2.imencode('.png', img)[1].tobytes())
    orientations = [1] + list(range(1, 9)) + [1]
    decoded = decode_images(files, torch.device('cpu'))
    for data, image, orientation in zip(files, decoded, orientations):
        want = mmcv.imfrombytes(data, backend='cv2')
        got = apply_exif_orientation(image, orientation)
        got = got.flip(0).permute(1, 2, 0).numpy()
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize('dtype', [torch.uint8, torch.float32])
def test_antialiased_crops_within_two_levels_of_pillow(dtype):
    """Crop + antialiased bilinear resize as mmpretrain's
    RandomResizedCrop(backend='pillow'), on the uint8 CPU kernel (workers)
    and in float (the device path on a GPU). Each is within half a level
    plus its fixed-point error (< 0.01) of the exact filter before
    rounding (PIL rounds its horizontal pass to uint8, the vertical pass
    is a convex combination; float is within 1e-4), so the rounded outputs
    differ by at most 2 levels. Differing values are rare (measured
    0.005% on uint8, 15% in float): the mean difference stays under 0.5."""
    img = photo_crop(120, 160, seed=3)
    tensor = torch.from_numpy(img).permute(2, 0, 1).to(dtype)
    for box in [(0, 0, 120, 160), (10, 20, 70, 90), (3, 5, 9, 7)]:
        top, left, h, w = box
        want = mmcv.imresize(
            img[top:top + h, left:left + w], (24, 24),
            interpolation='bilinear',
            backend='pillow').astype(int)
        got = antialiased_resized_crop(tensor, box, (24, 24))
        assert got.dtype == torch.uint8 and got.is_contiguous()
        diff = np.abs(got.permute(1, 2, 0).numpy().astype(int) - want)
        assert diff.max() <= 2 and diff.mean() < 0.5, box


def test_geometric_multi_view_fast_path_cuts_the_same_crops():
    """The ImageNet recipes' views (a PIL-backed RandomResizedCrop and a
    horizontal flip) are cut as CHW tensors with the transforms' own
    draws: the same boxes and flips as MultiView, the pixels within 2
    levels (test above)."""
    img = photo_crop(200, 260, seed=4)
    ours = build(
        dict(type='GeometricMultiView', num_views=[1, 2], transforms=[V2, V2]))
    assert ours.fast_views is not None
    ref = build(
        dict(
            type='MultiView',
            num_views=[1, 2],
            transforms=[[CROP, FLIP], [CROP, FLIP]]))
    np.random.seed(6)
    got = ours(dict(img=img.copy()))['img']
    np.random.seed(6)
    want = ref(dict(img=img.copy()))['img']
    for a, b in zip(got, want):
        assert a.dtype == torch.uint8 and a.shape == (3, 24, 24)
        diff = np.abs(a.permute(1, 2, 0).numpy().astype(int) - b)
        assert diff.max() <= 2 and diff.mean() < 0.5


def test_a_file_the_device_decoder_rejects_is_decoded_on_the_cpu(monkeypatch):
    """nvjpeg refuses some JPEGs (e.g. CMYK) and then fails the whole
    batch: each file is retried alone and the rejected one goes through
    the CPU decoder (simulated here)."""
    import torchvision.io as tvio

    from mocoplug.models.utils.batch_augments import decode_resized_crop
    files = [
        cv2.imencode('.jpg', photo_crop(20, 30, seed))[1].tobytes()
        for seed in range(3)
    ]
    real = tvio.decode_jpeg

    def device_decoder(data, **kwargs):
        if isinstance(data, list) or bytes(data.numpy()) == files[1]:
            raise RuntimeError('nvjpeg: unsupported')
        return real(data, **kwargs)

    monkeypatch.setattr(decode_resized_crop.tvio, 'decode_jpeg',
                        device_decoder)
    decoded = decode_resized_crop.decode_images(files, torch.device('cpu'))
    for data, image in zip(files, decoded):
        want = mmcv.imfrombytes(data, backend='cv2')
        np.testing.assert_array_equal(
            image.flip(0).permute(1, 2, 0).numpy(), want)
