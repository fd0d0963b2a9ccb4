# Copyright (c) mocoplug contributors. All rights reserved.
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as TF
from mmpretrain.datasets.transforms import GaussianBlur

from mocoplug.datasets.transforms import FastGaussianBlur
from mocoplug.datasets.transforms.fast_gaussian_blur import kernel_size
from .photo import photo_crop

MOCO_V2 = dict(magnitude_range=(0.1, 2.0), magnitude_std='inf', prob=0.5)


@pytest.mark.parametrize('sigma', [0.1, 0.5, 1.0, 1.37, 2.0])
def test_matches_torchvision_gaussian_blur_within_one_grey_level(sigma):
    img = photo_crop(24, 30, seed=2)
    out = FastGaussianBlur(radius=sigma, prob=1.)(dict(img=img))['img']
    size = kernel_size(sigma)
    ref = TF.gaussian_blur(
        torch.from_numpy(img).permute(2, 0, 1), [size, size], [sigma, sigma])
    ref = ref.permute(1, 2, 0).numpy().astype(int)
    # OpenCV's 8-bit blur is bit-exact fixed point (the same on every CPU)
    # and within 0.98 of the exact blur on this photo; torchvision's float32
    # blur is within 4e-4 of it and rounds once. Whichever way a CPU rounds
    # a value near .5, the two differ by < 0.98 + 0.5 + 4e-4 < 2 levels.
    assert np.abs(out.astype(int) - ref).max() <= 1


def test_kernel_covers_three_sigma():
    assert [kernel_size(s) for s in (0.1, 0.34, 1.0, 2.0)] == [3, 5, 7, 13]


def test_same_draws_as_mmpretrain_and_sigma_in_range(monkeypatch):
    """Same seed: blurred or not the same times with the same sigma, and
    the same RNG use; sigma is uniform on [0.1, 2.0] as in MoCo v2."""
    import mmpretrain.datasets.transforms.auto_augment as mmpretrain_aug

    import mocoplug.datasets.transforms.fast_gaussian_blur as ours_module
    ours_sigmas, ref_sigmas = [], []
    real_cv2_blur = ours_module.cv2.GaussianBlur
    real_pil_blur = mmpretrain_aug.ImageFilter.GaussianBlur

    def cv2_spy(img, ksize, sigmaX, **kwargs):
        ours_sigmas.append(sigmaX)
        return real_cv2_blur(img, ksize, sigmaX=sigmaX, **kwargs)

    def pil_spy(radius):
        ref_sigmas.append(radius)
        return real_pil_blur(radius)

    monkeypatch.setattr(ours_module.cv2, 'GaussianBlur', cv2_spy)
    monkeypatch.setattr(mmpretrain_aug.ImageFilter, 'GaussianBlur', pil_spy)
    img = photo_crop(12, 12, seed=0)
    ours, ref = FastGaussianBlur(**MOCO_V2), GaussianBlur(**MOCO_V2)
    for seed in range(40):
        np.random.seed(seed)
        ours(dict(img=img.copy()))
        next_a = np.random.rand()
        np.random.seed(seed)
        ref(dict(img=img.copy()))
        assert np.random.rand() == next_a
        assert ours_sigmas == ref_sigmas
    assert 10 < len(ours_sigmas) < 30
    np.random.seed(0)
    sigmas = [ours.random_magnitude() for _ in range(2000)]
    assert 0.1 <= min(sigmas) < 0.12 and 1.98 < max(sigmas) <= 2.0
    assert np.mean(sigmas) == pytest.approx(1.05, abs=0.03)


def test_close_to_mmpretrain_pil_blur():
    """Stated tolerance against PIL's box approximation of the same sigma:
    under 1 grey level on average on a photo."""
    img = photo_crop(64, 64, seed=1)
    for sigma in (0.5, 1.0, 2.0):
        ours = FastGaussianBlur(radius=sigma, prob=1.)(dict(img=img))['img']
        ref = GaussianBlur(radius=sigma, prob=1.)(dict(img=img))['img']
        assert np.abs(ours.astype(int) - ref).mean() < 1.0
