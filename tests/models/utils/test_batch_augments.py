# Copyright (c) mocoplug contributors. All rights reserved.
"""Each batched photometric operation against the per-image ``Fast*``
transform (or mmpretrain's) given the same parameters, image by image, on
crops of real photographs."""
import cv2
import numpy as np
import pytest
import torch
from mmpretrain.datasets.transforms import Solarize

import mocoplug.datasets.transforms.fast_color_jitter as fast_module
import mocoplug.models.utils.batch_augments.batch_color_jitter as batch_module
from mocoplug.datasets.transforms import (FastColorJitter, FastGaussianBlur,
                                          FastRandomGrayscale)
from mocoplug.models.utils.batch_augments import (BatchColorJitter,
                                                  BatchGaussianBlur,
                                                  BatchRandomGrayscale,
                                                  BatchSolarize)
from mocoplug.models.utils.batch_augments.batch_color_jitter import (
    BRIGHTNESS, CONTRAST, HUE, SATURATION, rotate_hue)
from mocoplug.models.utils.batch_augments.batch_gaussian_blur import \
    fixed_point_kernels
from ...datasets.photo import photo_crop

RANGES = dict(
    brightness=(0.6, 1.4),
    contrast=(0.6, 1.4),
    saturation=(0.6, 1.4),
    hue=(-0.1, 0.1))


def photos(num, height=36, width=44):
    """``num`` BGR uint8 photo crops, as a list and as a float32 batch."""
    images = [photo_crop(height, width, seed) for seed in range(num)]
    batch = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float()
    return images, batch


def as_numpy(batch):
    return [x.permute(1, 2, 0).numpy().astype(np.uint8) for x in batch]


def fast_jitter(img, order, b=None, c=None, s=None, h=None):
    """FastColorJitter on one image with the given order and factors."""
    jitter = FastColorJitter(**RANGES)
    jitter._rand_params = lambda: (order, b, c, s, h)
    return jitter(dict(img=img.copy()))['img']


def jitter_params(num, order, apply=True, **factors):
    params = dict(
        apply=torch.full((num, ), apply), order=torch.tensor([order] * num))
    for name, values in factors.items():
        params[name] = torch.tensor(values, dtype=torch.float64)
    return params


@pytest.mark.parametrize('op,name', [(BRIGHTNESS, 'brightness'),
                                     (CONTRAST, 'contrast'),
                                     (SATURATION, 'saturation')])
def test_blends_are_bit_identical_to_pil(op, name):
    """PIL's ImageEnhance blends, factors inside and outside [0, 1]
    (interpolation and clipped extrapolation), 0 and 1 included: the same
    float32 operations on the same integers, so equal bit for bit."""
    factors = [0., 0.37, 0.6, 0.999, 1., 1.01, 1.4, 2.3]
    images, batch = photos(len(factors))
    order = [op] + [k for k in range(4) if k != op]
    jitter = BatchColorJitter(**{name: RANGES[name]})
    out = jitter(batch, jitter_params(len(factors), order, **{name: factors}))
    for img, got, factor in zip(images, as_numpy(out), factors):
        want = fast_jitter(img, order, **{name[0]: factor})
        np.testing.assert_array_equal(got, want, err_msg=f'{name} {factor}')


def unrounded_fast_hue(rgb, factor):
    """FastColorJitter's hue rotation (OpenCV float HSV) before its final
    rounding, x 255."""
    hsv = cv2.cvtColor(
        rgb.astype(np.float32) * np.float32(1 / 255), cv2.COLOR_RGB2HSV)
    hue = hsv[..., 0]
    hue += np.float32((factor * 360) % 360)
    np.subtract(hue, 360, out=hue, where=hue >= 360)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB) * 255


def test_hue_within_one_grey_level_of_fast_color_jitter():
    """Both rotate the hue in float32 HSV and round once; the map is
    continuous, so float32 rounding (~1e-4 grey levels) can move a rounded
    value by 1 level, and only where the exact value is that close to a
    half level (quarter turns hit exact halves often)."""
    factors = [-0.5, -0.1, -0.03, 0., 0.02, 0.1, 0.25, 0.5]
    images, batch = photos(len(factors))
    out = rotate_hue(batch, torch.tensor(factors, dtype=torch.float64))
    for img, got, factor in zip(images, as_numpy(out), factors):
        want = fast_jitter(img, [HUE, 0, 1, 2], h=factor)
        diff = np.abs(got.astype(int) - want.astype(int))
        assert diff.max() <= 1, factor
        exact = unrounded_fast_hue(img[..., ::-1], factor)[..., ::-1]
        off_half = np.abs(exact[diff > 0] % 1 - 0.5)
        assert (off_half < 1e-3).all(), (factor, off_half.max())


def test_random_order_and_apply_as_fast_color_jitter(monkeypatch):
    """Every order of the four operations, some samples not jittered. Both
    sides rotate the hue with the batched function (its own accuracy is the
    test above), so the order logic must give the same images bit for bit.
    """

    def batched_hue(rgb, factor):  # FastColorJitter's hue, batched code
        bgr = torch.from_numpy(rgb[..., ::-1].copy()).permute(2, 0, 1)
        out = rotate_hue(bgr[None].float(),
                         torch.tensor([factor], dtype=torch.float64))
        return out[0].flip(0).permute(1, 2, 0).numpy().astype(np.uint8)

    monkeypatch.setattr(fast_module, 'rotate_hue', batched_hue)
    orders = torch.tensor(
        [list(p) for p in __import__('itertools').permutations(range(4))])
    num = len(orders)
    images, batch = photos(num)
    rng = np.random.RandomState(0)
    params = dict(
        apply=torch.from_numpy(rng.rand(num) < 0.8),
        order=orders,
        **{k: torch.from_numpy(rng.uniform(*RANGES[k], num))
           for k in RANGES})
    out = as_numpy(BatchColorJitter(**RANGES)(batch, params))
    for i in range(num):
        if not params['apply'][i]:
            np.testing.assert_array_equal(out[i], images[i])
            continue
        b, c, s, h = (float(params[k][i]) for k in RANGES)
        want = fast_jitter(images[i], orders[i].tolist(), b, c, s, h)
        np.testing.assert_array_equal(out[i], want, err_msg=str(orders[i]))


def test_contrast_only_jitter_as_mmpretrain_digits_recipe():
    """The digits recipe jitters contrast only (mmpretrain's ColorJitter,
    pillow backend: the same PIL blend)."""
    from mmpretrain.datasets.transforms import ColorJitter
    factors = [0.5, 0.8, 1.2, 1.5]
    images, batch = photos(len(factors), 32, 32)
    jitter = BatchColorJitter(contrast=(0.5, 1.5))
    out = as_numpy(
        jitter(batch, jitter_params(4, [1, 0, 2, 3], contrast=factors)))
    for img, got, factor in zip(images, out, factors):
        ref = ColorJitter(contrast=0.5)
        ref._rand_params = lambda f=factor: ([1], None, f, None, None)
        np.testing.assert_array_equal(got, ref(dict(img=img.copy()))['img'])


def test_grayscale_is_bit_identical_to_fast_random_grayscale():
    images, batch = photos(4)
    weights = (0.114, 0.587, 0.2989)
    grey = BatchRandomGrayscale(0.2, weights)
    apply = torch.tensor([True, False, True, True])
    out = as_numpy(grey(batch, dict(apply=apply)))
    ref = FastRandomGrayscale(
        prob=1., keep_channels=True, channel_weights=weights)
    for img, got, flag in zip(images, out, apply):
        want = ref(dict(img=img.copy()))['img'] if flag else img
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize('size', [(36, 44), (32, 32), (13, 21)])
def test_blur_is_bit_identical_to_fast_gaussian_blur(size):
    """OpenCV's uint8 fixed-point blur, reproduced exactly: sigma at the
    ends of MoCo's range, values where the kernel width changes
    (3 sigma an integer), and a random spread."""
    sigmas = [0.1, 1 / 3, 0.34, 0.5, 1.0, 4 / 3, 1.37, 1.99, 2.0]
    sigmas += np.random.RandomState(0).uniform(0.1, 2.0, 7).tolist()
    if min(size) <= 13:
        sigmas = [s for s in sigmas if s <= 2]  # radius 6 < 13
    images, batch = photos(len(sigmas), *size)
    blur = BatchGaussianBlur((0.1, 2.0), 0.5)
    apply = torch.ones(len(sigmas), dtype=torch.bool)
    apply[3] = False
    out = as_numpy(
        blur(
            batch,
            dict(apply=apply, sigma=torch.tensor(sigmas,
                                                 dtype=torch.float64))))
    for i, (img, got, sigma) in enumerate(zip(images, out, sigmas)):
        want = img if not apply[i] else FastGaussianBlur(
            radius=sigma, prob=1.)(dict(img=img.copy()))['img']
        np.testing.assert_array_equal(got, want, err_msg=f'sigma {sigma}')


def test_fixed_point_kernels_sum_to_256_and_are_symmetric():
    sigma = torch.tensor([0., 0.1, 0.7, 2.0], dtype=torch.float64)
    kernels = fixed_point_kernels(sigma, 6)
    assert kernels.shape == (4, 13)
    assert (kernels.sum(1) == 256).all()
    assert torch.equal(kernels, kernels.flip(1))
    assert kernels[0].tolist() == [0] * 6 + [256] + [0] * 6  # identity
    assert (kernels[1, :5] == 0).all()  # sigma 0.1: width 3


@pytest.mark.parametrize('size', [4, 3])
def test_blur_radius_not_below_the_image_side_is_refused(size):
    """Sigma 1 blurs with radius 3: 4 px images are blurred, 3 px ones
    (reflect-101 padding needs radius < side) refused with the fix."""
    blur = BatchGaussianBlur((1., 1.), prob=1.)
    images = torch.zeros(1, 1, size, size)
    params = blur.sample(1, torch.Generator().manual_seed(0), 'cpu')
    if size > 3:
        assert torch.equal(blur(images, params), images)
        return
    with pytest.raises(ValueError) as error:
        blur(images, params)
    assert str(error.value) == (
        'BatchGaussianBlur: the radius 3 (ceil(3 * max sigma)) is not < the '
        'image side 3 px: lower the max of sigma_range to <= 0.666667 or '
        'blur larger images')


def test_solarize_is_mmpretrains():
    images, batch = photos(3)
    apply = torch.tensor([True, False, True])
    out = as_numpy(BatchSolarize(128, 0.2)(batch, dict(apply=apply)))
    for img, got, flag in zip(images, out, apply):
        want = Solarize(thr=128, prob=1.)(dict(img=img.copy()))['img'] \
            if flag else img
        np.testing.assert_array_equal(got, want)
    values = torch.arange(256.).view(1, 1, 1, 256)
    flipped = BatchSolarize(128, 1.)(values, dict(apply=torch.tensor([True])))
    assert flipped[0, 0, 0, 127] == 127 and flipped[0, 0, 0, 128] == 127
    assert flipped[0, 0, 0, 255] == 0


def test_ops_keep_the_batch_on_its_device_without_host_sync(monkeypatch):
    """No .item() / .tolist() / boolean-mask indexing in the batched ops,
    and no tensor made from host data (torch.tensor copies from the host
    and waits for the device): calling them raises here."""

    def forbidden(*args, **kwargs):
        raise AssertionError('host synchronisation')

    ops = [
        BatchColorJitter(**RANGES, prob=0.8),
        BatchRandomGrayscale(0.2, (0.114, 0.587, 0.2989)),
        BatchGaussianBlur((0.1, 2.0), 0.5),
        BatchSolarize(128, 0.2)
    ]
    _, batch = photos(4)
    generator = torch.Generator().manual_seed(0)
    params = [op.sample(4, generator, torch.device('cpu')) for op in ops]
    for name in ('item', 'tolist', 'nonzero', '__bool__'):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    monkeypatch.setattr(torch, 'nonzero', forbidden)
    monkeypatch.setattr(torch, 'masked_select', forbidden)
    monkeypatch.setattr(torch, 'tensor', forbidden)
    monkeypatch.setattr(torch, 'as_tensor', forbidden)
    monkeypatch.setattr(torch, 'from_numpy', forbidden)
    for op, op_params in zip(ops, params):
        batch = op(batch, op_params)
    assert batch.shape == (4, 3, 36, 44)


def test_slots_skip_nothing_with_hue_disabled():
    """Without hue the blends run in each sample's order (bit-identical to
    the per-image transform with hue=0)."""
    images, batch = photos(3)
    ranges = dict(RANGES, hue=0.)
    orders = [[2, 3, 0, 1], [1, 0, 2, 3], [3, 2, 1, 0]]
    jitter = BatchColorJitter(RANGES['brightness'], RANGES['contrast'],
                              RANGES['saturation'], None)
    params = dict(
        apply=torch.ones(3, dtype=torch.bool),
        order=torch.tensor(orders),
        brightness=torch.tensor([0.7, 1.3, 0.9], dtype=torch.float64),
        contrast=torch.tensor([1.2, 0.8, 1.1], dtype=torch.float64),
        saturation=torch.tensor([0.65, 1.35, 1.0], dtype=torch.float64))
    out = as_numpy(jitter(batch, params))
    for i, img in enumerate(images):
        ref = FastColorJitter(**ranges)
        factors = [float(params[k][i]) for k in RANGES if k != 'hue']
        ref._rand_params = lambda i=i, f=factors: (orders[i], *f, None)
        np.testing.assert_array_equal(out[i], ref(dict(img=img.copy()))['img'])
    assert batch_module.NO_OP == -1


def test_flips_commute_with_every_photometric_step():
    """Why the workers may flip before the device's steps although the
    recipes flip last: the steps act per pixel or on whole-image
    statistics, and the blur kernel and border are symmetric."""
    _, batch = photos(4)
    ops = [
        BatchColorJitter(**RANGES),
        BatchRandomGrayscale(1., (0.114, 0.587, 0.2989)),
        BatchGaussianBlur((0.1, 2.0), 1.),
        BatchSolarize(128, 1.)
    ]
    generator = torch.Generator().manual_seed(0)
    for op in ops:
        params = op.sample(4, generator, torch.device('cpu'))
        for dims in ((-1, ), (-2, )):
            assert torch.equal(
                op(batch.flip(dims), params),
                op(batch, params).flip(dims))


@pytest.mark.parametrize('mode', ['bilinear', 'bicubic'])
def test_batched_crops_are_the_per_image_antialiased_resize(mode):
    """resized_crops of a zero-padded batch of photos of several sizes,
    downscaling and upscaling crops: each is torch's antialiased resize of
    the crop alone in float32 (the per-image path on a GPU), before
    rounding. Each side sums at most K taps per axis, weights of absolute
    sum at most S per axis, values <= 255, in float32 (u = 2^-24) with
    weights normalised by a K-term sum: within (2 (K_y + K_x) + 12) u
    255 S_y S_x of the exact value, so twice that between the two."""
    from mocoplug.models.utils.batch_augments.decode_resized_crop import (
        filter_weights, resized_crops)
    sizes = [(48, 64), (40, 36), (64, 52), (30, 30)]
    images = [
        torch.from_numpy(photo_crop(h, w, seed)).permute(2, 0, 1)
        for seed, (h, w) in enumerate(sizes)
    ]
    boxes = torch.tensor([[3, 5, 40, 50], [0, 0, 40, 36], [10, 2, 9, 13],
                          [7, 4, 20, 26]])
    out_size = (16, 20)
    batch = torch.zeros(len(images), 3, 64, 64)
    for b, image in zip(batch, images):
        b[:, :image.shape[1], :image.shape[2]] = image
    got = resized_crops(batch, boxes, out_size, mode)
    taps, abs_sum = 0, 1.
    for axis, (start, length) in enumerate(((0, 2), (1, 3))):
        weights = filter_weights(boxes[:, start].float(),
                                 boxes[:, length].float(), out_size[axis], 64,
                                 mode)
        taps += int((weights != 0).sum(-1).max())
        abs_sum *= weights.abs().sum(-1).max().item()
    atol = 2 * (2 * taps + 12) * 2**-24 * 255 * abs_sum
    for image, box, crop in zip(images, boxes.tolist(), got):
        top, left, height, width = box
        want = torch.nn.functional.interpolate(
            image[None, :, top:top + height, left:left + width].float(),
            size=out_size,
            mode=mode,
            antialias=True,
            align_corners=False)[0]
        torch.testing.assert_close(crop, want, rtol=0, atol=atol)
