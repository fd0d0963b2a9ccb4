# Copyright (c) mocoplug contributors. All rights reserved.
"""DeviceAugmentDataPreprocessor: the sampled parameters follow the
recipes' probabilities and ranges, the whole v2 recipe gives the per-image
path's image statistics, and the generator's state travels in the state
dict (exact resume) and is shared by the ranks of a distributed run.

Statistical checks use fixed seeds (so they pass or fail the same way every
run) with bounds at a stated false-alarm rate for a random seed: 5 standard
errors for rates and means (two-sided normal tail 5.7e-7), the
Dvoretzky-Kiefer-Wolfowitz bound at 1e-6 for the uniform draws (exact, no
approximation), the chi-square quantile at 1e-6 for permutations.
"""
import copy
import itertools
import math
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmpretrain.models.utils import SelfSupDataPreprocessor
from mmpretrain.structures import DataSample
from scipy.stats import chi2

from mocoplug.models import DeviceAugmentDataPreprocessor, data_preprocessors
from mocoplug.models.utils import batch_augments
from mocoplug.models.utils.batch_augments import (BatchColorJitter,
                                                  BatchGaussianBlur,
                                                  BatchRandomGrayscale,
                                                  BatchSolarize,
                                                  PhotometricViewAugment)
from mocoplug.registry import TRANSFORMS
from ...datasets.photo import photo_crop

MODULE = data_preprocessors.device_augment_data_preprocessor
DECODE = batch_augments.decode_resized_crop
ROOT = osp.dirname(
    osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
Z = 5.  # standard errors: two-sided normal tail 5.7e-7
ALPHA = 1e-6  # false-alarm rate of the DKW and chi-square bounds
NORM = dict(
    mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)


def config(name):
    return Config.fromfile(osp.join(ROOT, 'configs', name))


V2 = config('mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py').view_pipeline
V3_CFG = config('mocov3/mocov3_r50_8xb512-amp-coslr-100e_in1k.py')
V3 = [V3_CFG.view_pipeline1, V3_CFG.view_pipeline2]
DIGITS = config(
    'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py'
).view_pipeline


def assert_rate(flags, p):
    flags = flags.double()
    if p in (0., 1.):
        assert (flags == p).all()
        return
    n = flags.numel()
    assert abs(flags.mean().item() - p) <= Z * math.sqrt(p * (1 - p) / n)


def assert_uniform(values, low, high):
    values = values.double().sort().values
    assert low <= values[0] and values[-1] <= high
    n = values.numel()
    u = (values - low) / (high - low)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    distance = torch.maximum(i / n - u, u - (i - 1) / n).max().item()
    assert distance <= math.sqrt(math.log(2 / ALPHA) / (2 * n))


def assert_uniform_permutations(orders):
    perms = {p: i for i, p in enumerate(itertools.permutations(range(4)))}
    counts = np.bincount([perms[tuple(o)] for o in orders.tolist()],
                         minlength=24)
    expected = len(orders) / 24
    statistic = ((counts - expected)**2 / expected).sum()
    assert statistic <= chi2.isf(ALPHA, 23)


def draw(pipeline, num=20000, seed=0):
    augment = PhotometricViewAugment(pipeline)
    generator = torch.Generator().manual_seed(seed)
    return augment, augment.sample(num, generator, torch.device('cpu'))


def test_parameters_follow_the_mocov2_recipe():
    augment, (jitter, grey, blur) = draw(V2)
    assert [type(op) for op in augment.ops
            ] == [BatchColorJitter, BatchRandomGrayscale, BatchGaussianBlur]
    assert_rate(jitter['apply'], 0.8)
    for name in ('brightness', 'contrast', 'saturation'):
        assert_uniform(jitter[name], 0.6, 1.4)
    assert_uniform(jitter['hue'], -0.1, 0.1)
    assert_uniform_permutations(jitter['order'])
    assert_rate(grey['apply'], 0.2)
    assert_rate(blur['apply'], 0.5)
    assert_uniform(blur['sigma'], 0.1, 2.0)
    assert augment.ops[1].weights == pytest.approx(
        [0.114 / 0.9999, 0.587 / 0.9999, 0.2989 / 0.9999])


def test_mocov3_views_are_asymmetric():
    """Blur 1.0 / 0.1, solarize 0 / 0.2, saturation 0.2 (BYOL's views)."""
    for pipeline, blur_p, solarize_p in zip(V3, (1., 0.1), (0., 0.2)):
        augment, (jitter, grey, blur, solarize) = draw(pipeline)
        assert isinstance(augment.ops[3], BatchSolarize)
        assert augment.ops[3].thr == 128
        assert_rate(jitter['apply'], 0.8)
        assert_uniform(jitter['saturation'], 0.8, 1.2)
        assert_rate(grey['apply'], 0.2)
        assert_rate(blur['apply'], blur_p)
        assert_uniform(blur['sigma'], 0.1, 2.0)
        assert_rate(solarize['apply'], solarize_p)


def test_digits_recipe_jitters_contrast_and_blurs():
    augment, (jitter, blur) = draw(DIGITS)
    assert [g['type'] for g in augment.geometric
            ] == ['NumpyToPIL', 'torchvision/RandomAffine', 'PILToNumpy']
    assert set(jitter) == {'apply', 'order', 'contrast'}
    assert_rate(jitter['apply'], 0.8)
    assert_uniform(jitter['contrast'], 0.5, 1.5)
    assert_rate(blur['apply'], 0.5)
    assert_uniform(blur['sigma'], 0.1, 1.0)


def build(seed=0, transforms=(V2, ), num_views=2, **kwargs):
    return DeviceAugmentDataPreprocessor(
        transforms=[list(t) for t in transforms],
        num_views=num_views,
        seed=seed,
        **dict(NORM, **kwargs))


def batch(num=4, size=40, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randint(
            0, 256, (num, 3, size, size), generator=gen, dtype=torch.uint8)
        for _ in range(2)
    ]


def run(preprocessor, views):
    return preprocessor(dict(inputs=views, data_samples=None), True)['inputs']


def test_state_dict_carries_the_generator_and_resumes_its_stream():
    a = build(seed=1)
    run(a, batch(seed=0))
    state = a.state_dict()
    assert state['generator_state'].dtype == torch.uint8
    assert state['generator_state'].numel() > 0
    after = run(a, batch(seed=1))
    b = build(seed=2)
    b.load_state_dict(state)
    for x, y in zip(after, run(b, batch(seed=1))):
        assert torch.equal(x, y)
    c = copy.deepcopy(a)  # (mmengine's EMA and checkpoints deep-copy)
    for x, y in zip(run(a, batch(seed=2)), run(c, batch(seed=2))):
        assert torch.equal(x, y)


def test_checkpoint_without_the_state_is_reported_missing():
    """A strict load (what --resume needs for exactness) names it."""
    state = build().state_dict()
    del state['generator_state']
    with pytest.raises(RuntimeError, match='generator_state'):
        build().load_state_dict(state, strict=True)


def test_seeded_from_the_runs_seed():
    torch.manual_seed(0)
    a = run(build(seed=None), batch())
    torch.manual_seed(0)
    b = run(build(seed=None), batch())
    torch.manual_seed(1)
    c = run(build(seed=None), batch())
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))


def test_ranks_take_their_slice_of_one_global_draw(monkeypatch):
    """Two ranks with the same generator: each rank's views are augmented
    as its half of the global batch in a single process, so the ranks'
    parameters differ and one saved state serves all of them."""
    views = batch(num=6)
    whole = run(build(), views)
    for rank in (0, 1):
        monkeypatch.setattr(MODULE, 'get_dist_info', lambda r=rank: (r, 2))
        part = run(build(), [v[rank * 3:(rank + 1) * 3] for v in views])
        for x, y in zip(part, whole):
            assert torch.equal(x, y[rank * 3:(rank + 1) * 3])


def test_training_leaves_the_data_samples_on_the_host():
    """MoCo reads only their metainfo: no per-sample copy to the device."""
    samples = [DataSample(metainfo=dict(sample_idx=i)) for i in range(4)]
    samples[0].set_gt_label(3)
    out = build()(dict(inputs=batch(), data_samples=samples), True)
    assert all(a is b for a, b in zip(out['data_samples'], samples))


def test_evaluation_is_selfsup_preprocessing():
    views = batch()
    plain = SelfSupDataPreprocessor(**NORM)
    data = dict(inputs=views[0], data_samples=None)
    assert torch.equal(build()(data, False)['inputs'],
                       plain(data, False)['inputs'])


def test_clear_errors():
    with pytest.raises(ValueError, match=r'step 1 \(Posterize\)'):
        build(transforms=[[V2[0], dict(type='Posterize', bits=4)]])
    with pytest.raises(ValueError, match='2 view pipelines'):
        build(transforms=[V2, V2], num_views=2)
    with pytest.raises(TypeError, match='list of B x 3 x H x W views'):
        build()(dict(inputs=batch()[0]), True)
    with pytest.raises(ValueError, match='3 views in the batch'):
        run(build(), batch() + batch()[:1])


def view_statistics(views):
    """Per view: channel means and stds of the normalised image, and
    whether it is grey (all channels equal before normalisation)."""
    mean = torch.tensor(NORM['mean']).view(1, 3, 1, 1)
    std = torch.tensor(NORM['std']).view(1, 3, 1, 1)
    raw = views * std + mean
    grey = (raw - raw[:, :1]).abs().amax(dim=(1, 2, 3)) < 0.01
    return views.mean(dim=(2, 3)), views.std(dim=(2, 3)), grey


def per_image_views(pipeline, images):
    with DefaultScope.overwrite_default_scope('mocoplug'):
        multi_view = TRANSFORMS.build(
            dict(type='MultiView', num_views=2, transforms=[pipeline]))
    np.random.seed(0)
    out = [multi_view(dict(img=img.copy()))['img'] for img in images]
    views = torch.stack([
        torch.from_numpy(v[..., ::-1].copy()).permute(2, 0, 1) for pair in out
        for v in pair
    ]).float()
    norm = SelfSupDataPreprocessor(**NORM)
    return (views - norm.mean) / norm.std


def device_views(pipeline, images):
    with DefaultScope.overwrite_default_scope('mocoplug'):
        multi_view = TRANSFORMS.build(
            dict(
                type='GeometricMultiView', num_views=2, transforms=[pipeline]))
    np.random.seed(1)
    out = [multi_view(dict(img=img.copy()))['img'] for img in images]
    views = [torch.stack([p[k] for p in out]) for k in range(2)]  # CHW
    augmented = run(build(seed=3, transforms=[pipeline]), views)
    return torch.stack(augmented, dim=1).flatten(0, 1)


def v2_at(scale):
    pipeline = copy.deepcopy(list(V2))
    pipeline[0] = dict(pipeline[0], scale=scale)
    return pipeline


PHOTOS = [photo_crop(120, 160, seed) for seed in range(192)]


def test_mocov2_recipe_gives_the_per_image_channel_mean_and_std():
    """The whole v2 view pipeline (crop to 96 px instead of 224 to keep the
    test short) on 192 crops of real photographs, 2 views each, through
    the per-image path and the device path with independent random draws:
    per channel, the average over views of the view's mean and standard
    deviation, and the share of grey views (0.2), agree within 5 standard
    errors of their difference."""
    ours = view_statistics(device_views(v2_at(96), PHOTOS))
    ref = view_statistics(per_image_views(v2_at(96), PHOTOS))
    for a, b in zip(ours[:2], ref[:2]):
        se = (a.var(0) / len(a) + b.var(0) / len(b)).sqrt()
        assert ((a.mean(0) - b.mean(0)).abs()
                <= Z * se).all(), (a.mean(0), b.mean(0))
    grey_a, grey_b = ours[2].double(), ref[2].double()
    pooled = (grey_a.mean() + grey_b.mean()) / 2
    se = math.sqrt(pooled * (1 - pooled) * 2 / len(grey_a))
    assert abs(grey_a.mean() - grey_b.mean()) <= Z * se
    assert abs(grey_a.mean() - 0.2) <= Z * math.sqrt(0.16 / len(grey_a))


def changes(views, crops):
    """Per view, what the photometric steps did: the change of each
    channel's mean and of the log of its standard deviation (jitter,
    grayscale), and of the log mean horizontal gradient (blur)."""

    def sharpness(x):
        return (x[..., 1:] - x[..., :-1]).abs().mean(dim=(1, 2, 3))

    return [
        views.mean(dim=(2, 3)) - crops.mean(dim=(2, 3)),
        (views.std(dim=(2, 3)) + 1).log() - (crops.std(dim=(2, 3)) + 1).log(),
        ((sharpness(views) + 1).log() - (sharpness(crops) + 1).log())[:, None]
    ]


def test_photometric_half_has_the_per_image_distribution():
    """The same 384 crops (the workers' half is the same code in both
    paths, so it is drawn once) through the v2 recipe's photometric steps,
    per image (the transforms themselves) and batched. Each change
    statistic has the same distribution: two-sample Kolmogorov-Smirnov
    p-value above 1e-6. (Dropping the colour jitter or the blur gives
    p < 1e-10 here; flips commute with every photometric step, see
    tests/models/utils/test_batch_augments.py.)"""
    from mmengine.dataset import Compose
    from scipy.stats import ks_2samp

    from mocoplug.datasets.transforms.view_pipeline_split import \
        split_view_pipeline
    pipeline = v2_at(96)
    with DefaultScope.overwrite_default_scope('mocoplug'):
        geometric = TRANSFORMS.build(
            dict(
                type='GeometricMultiView', num_views=2, transforms=[pipeline]))
        photometric = Compose(split_view_pipeline(pipeline)[1])
    np.random.seed(0)
    crops = [  # (the workers' views are CHW tensors)
        view.permute(1, 2, 0).contiguous().numpy() for img in PHOTOS
        for view in geometric(dict(img=img.copy()))['img']
    ]
    per_image = [photometric(dict(img=c.copy()))['img'] for c in crops]

    def to_batch(images):  # BGR HWC uint8 -> BGR float batch
        return torch.stack(
            [torch.from_numpy(i).permute(2, 0, 1) for i in images]).float()

    crops_t = to_batch(crops)
    device = build(seed=3, transforms=[pipeline], num_views=1, to_rgb=False)
    ours = run(device, [crops_t.to(torch.uint8)])[0] * device.std + \
        device.mean
    for a, b in zip(
            changes(ours, crops_t), changes(to_batch(per_image), crops_t)):
        for channel in range(a.shape[1]):
            p_value = ks_2samp(a[:, channel].numpy(),
                               b[:, channel].numpy()).pvalue
            assert p_value > ALPHA


def encoded_photos(tmp_path):
    """Six photographs as files (JPEG and PNG) read by the workers'
    LoadImageBytes, CropBoxMultiView and PackEncodedViews, collated; the
    images as OpenCV decodes them; the view pipeline."""
    import mmcv
    from mmengine.dataset import default_collate
    crop = dict(
        type='RandomResizedCrop',
        scale=32,
        crop_ratio_range=(0.2, 1.),
        backend='pillow')
    views = [crop, dict(type='RandomFlip', prob=0.5)]
    images, samples = [], []
    with DefaultScope.overwrite_default_scope('mocoplug'):
        steps = [
            TRANSFORMS.build(dict(type='LoadImageBytes')),
            TRANSFORMS.build(
                dict(type='CropBoxMultiView', num_views=2,
                     transforms=[views])),
            TRANSFORMS.build(dict(type='PackEncodedViews'))
        ]
    np.random.seed(0)
    for seed in range(6):
        path = str(tmp_path / f'{seed}.{"jpg" if seed % 2 else "png"}')
        mmcv.imwrite(photo_crop(90 + seed, 120, seed), path)
        images.append(mmcv.imread(path, backend='cv2'))
        results = dict(img_path=path)
        for step in steps:
            results = step(results)
        samples.append(results)
    return default_collate(samples), images, views


@pytest.mark.parametrize('padded', [None, 1], ids=['one-batch', 'by-size'])
def test_decoding_on_the_device_path_crops_as_the_workers(
        tmp_path, monkeypatch, padded):
    """Files read by the workers (LoadImageBytes, CropBoxMultiView,
    PackEncodedViews), decoded, cropped, resized and flipped by the
    preprocessor on the CPU, JPEGs and PNGs mixed, resized in one padded
    batch or one image at a time (in order of size): each view is the
    per-image pipeline's crop of the same box (OpenCV decoding, mmcv's
    pillow resize), within 2 grey levels (the decoders agree exactly, the
    resize bound is argued in tests/datasets/
    test_device_augment_transforms.py), flipped when drawn."""
    import mmcv
    data, images, views = encoded_photos(tmp_path)
    if padded is not None:
        monkeypatch.setattr(DECODE, 'PADDED_ELEMENTS', padded)
    device = build(transforms=[views], to_rgb=False, mean=None, std=None)
    out = device(data, True)['inputs']
    boxes, flips = data['inputs']['crop_boxes'], data['inputs']['flips']
    for v in range(2):
        for b, img in enumerate(images):
            top, left, h, w = boxes[b, v].tolist()
            want = mmcv.imresize(
                img[top:top + h, left:left + w], (32, 32),
                interpolation='bilinear',
                backend='pillow')
            if flips[b, v]:
                want = want[:, ::-1]
            got = out[v][b].permute(1, 2, 0).numpy()
            assert np.abs(got - want).max() <= 2


def test_training_forward_never_waits_for_the_device(monkeypatch):
    """The whole training forward of the v3 views (every step) with the
    calls that synchronise with the device made to raise: .item(),
    .tolist(), boolean indexing, truth values, tensors from host data."""
    preprocessor = build(transforms=V3, num_views=[1, 1])
    views = batch()

    def forbidden(*args, **kwargs):
        raise AssertionError('host synchronisation')

    for name in ('item', 'tolist', 'nonzero', '__bool__'):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    for name in ('tensor', 'as_tensor', 'from_numpy', 'masked_select',
                 'nonzero'):
        monkeypatch.setattr(torch, name, forbidden)
    out = run(preprocessor, views)
    assert [o.shape for o in out] == [(4, 3, 40, 40)] * 2


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_augments_in_float32_under_the_optimizers_autocast(
        tmp_path, device, dtype):
    """mmengine runs the data preprocessor inside the optimizer wrapper's
    autocast (AMP): the decode's resize products ran in half precision (a
    resized crop off by up to 2 grey levels in 25% of the pixels); in
    float32, whatever the autocast, the views are those of a run without
    AMP, bit for bit."""
    if device == 'cpu' and dtype == torch.float16:
        pytest.skip('float16 autocast: CUDA (bfloat16 on the CPU)')
    data, _, views = encoded_photos(tmp_path)
    plain = build(seed=3, transforms=[views]).to(device)(data, True)
    with torch.autocast(torch.device(device).type, dtype=dtype):
        mixed = build(seed=3, transforms=[views]).to(device)(data, True)
    for a, b in zip(plain['inputs'], mixed['inputs']):
        assert b.dtype == torch.float32 and torch.equal(a, b)
