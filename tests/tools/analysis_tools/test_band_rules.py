# Copyright (c) mocoplug contributors. All rights reserved.
"""band_rules.py: the digits only in band 4 of 4 (16 bits), MoCo on every
band against the 3 channels of 8 bits a colour decode leaves (the table of
configs/mocov2/README.md, "Bands and bit depth"), one short run each."""
import glob
import os.path as osp

import mmcv
import numpy as np


def test_the_digits_only_in_band_4_are_lost_by_the_colour_decode(
        load_tool, tmp_path):
    import tifffile
    tool = load_tool('analysis_tools/band_rules')
    summary = tool.main([
        '--kinds', 'band4', '--epochs', '1', '--seeds', '0', '--work-dir',
        str(tmp_path)
    ])
    data = str(tmp_path / 'data' / 'band4')
    tiffs = sorted(glob.glob(data + '/val/*/*.tif'))
    assert len(tiffs) == 539  # the held-out digits, a folder per class
    img = tifffile.imread(tiffs[0])
    assert img.shape == (32, 32, 4) and img.dtype == np.uint16
    digit = img[..., 3]
    assert (digit % 257 == 0).all() and digit.max() > 255 * 257 // 2
    # what the digits-folder config's loader decodes, kept exactly
    decoded = mmcv.imread(
        osp.join(data + '-decoded', osp.relpath(tiffs[0], data))[:-4] + '.png',
        'unchanged')
    with open(tiffs[0], 'rb') as f:
        assert np.array_equal(decoded, mmcv.imfrombytes(f.read()))
    assert decoded.shape == (32, 32, 3) and decoded.dtype == np.uint8
    every = summary['band4, every band and bit']['knn']['mean']
    lost = summary['band4, 3 channels of 8 bits']['knn']['mean']
    # chance is 10%: with no information, the top-1 of 539 queries has a
    # binomial spread of 1.3 points, so 20 is 7 spreads above chance;
    # every band is far above it after one epoch (68% measured)
    assert lost < 20 < 40 < every, summary
