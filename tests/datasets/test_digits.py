# Copyright (c) mocoplug contributors. All rights reserved.
import numpy as np
import pytest
from PIL import Image
from sklearn.datasets import load_digits

from mocoplug.datasets import DigitsDataset, write_digits_folder


def test_splits_are_disjoint_stratified_and_cover_everything():
    train = DigitsDataset(split='train')
    test = DigitsDataset(split='test')
    train_idx = {
        train.get_data_info(i)['digits_index']
        for i in range(len(train))
    }
    test_idx = {
        test.get_data_info(i)['digits_index']
        for i in range(len(test))
    }
    assert not train_idx & test_idx
    assert len(train_idx | test_idx) == len(DigitsDataset(split='all')) \
        == 1797
    counts = np.bincount(test.get_gt_labels(), minlength=10)
    sizes = np.bincount(load_digits().target)
    assert np.abs(counts - 0.3 * sizes).max() <= 0.5  # 30% of each class


def test_images_are_the_bundled_digits_upsampled():
    digits = load_digits()
    data = DigitsDataset(split='all', img_size=32)
    info = data.get_data_info(5)
    img = info['img']
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8
    assert (img[..., 0] == img[..., 2]).all()
    assert info['gt_label'] == digits.target[5]
    # bilinear upsampling keeps the mean intensity of the 8x8 scan
    assert img[..., 0].mean() == pytest.approx(
        (digits.images[5] * 16).mean(), rel=0.1)


def test_unlabelled_mode_hides_labels_and_bad_split_is_refused():
    info = DigitsDataset(split='train', with_label=False).get_data_info(0)
    assert 'gt_label' not in info
    with pytest.raises(ValueError, match='split'):
        DigitsDataset(split='val')


def test_write_digits_folder_is_the_splits_as_labelled_png_files(tmp_path):
    assert write_digits_folder(str(tmp_path)) == dict(train=1258, val=539)
    train = DigitsDataset(split='train')
    info = train.get_data_info(0)
    path = (
        tmp_path / 'train' / str(info['gt_label']) /
        f'{info["digits_index"]:04d}.png')
    np.testing.assert_array_equal(np.asarray(Image.open(path)), info['img'])
    assert sorted(p.name for p in (tmp_path / 'val').iterdir()) == [
        str(d) for d in range(10)
    ]
    assert len(list(tmp_path.glob('val/*/*.png'))) == 539
