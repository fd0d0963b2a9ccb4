# Copyright (c) mocoplug contributors. All rights reserved.
"""Per-band mean and std of a folder's images in the files' value range,
from a seeded sample, as --cfg-options of the multiband config
(configs/mocov2/README.md, "Bands and bit depth")."""
import argparse

import numpy as np

from mocoplug.datasets.image_check import (decode_image, find_images,
                                           tiff_is_planar)


def band_stats(paths, backend: str = 'auto') -> tuple:
    """Mean and std per band (float64 sums) of ``paths``, decoded as the
    multiband config does (tifffile for TIFF, else cv2 unchanged); the
    bands and the dtype; ValueError if the files differ in either."""
    total = squares = None
    count, kinds = 0, set()
    for path in paths:
        tiff = path.lower().endswith(('.tif', '.tiff'))
        if tiff and tiff_is_planar(path):
            raise ValueError(f'{path}: bands before rows (bands x H x W); '
                             'write the TIFFs pixel-interleaved')
        img = decode_image(
            path,
            ('tifffile' if tiff else 'cv2') if backend == 'auto' else backend,
            'unchanged')
        img = img[..., None] if img.ndim == 2 else img
        kinds.add((img.shape[2], str(img.dtype)))
        if len(kinds) > 1:
            raise ValueError(f'{path}: {img.shape[2]} bands of {img.dtype}, '
                             f'the other files {sorted(kinds)}: one kind of '
                             'image a folder')
        pixels = img.reshape(-1, img.shape[2]).astype(np.float64)
        total = pixels.sum(0) + (0 if total is None else total)
        squares = (pixels**2).sum(0) + (0 if squares is None else squares)
        count += len(pixels)
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean**2, 0))
    return mean, std, kinds.pop()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('folder', help='the training images')
    parser.add_argument('--samples', type=int, default=256)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--backend', default='auto', help='tifffile, cv2')
    args = parser.parse_args(argv)
    paths = find_images(args.folder)
    if not paths:
        raise SystemExit(f'{args.folder}: no image under it')
    pick = np.random.default_rng(args.seed).permutation(len(paths))
    sample = [paths[i] for i in sorted(pick[:args.samples])]
    mean, std, (bands, dtype) = band_stats(sample, args.backend)
    print(f'{len(sample)} of {len(paths)} images: {bands} bands of {dtype}')
    means, stds = (','.join(f'{v:.6g}' for v in vs) for vs in (mean, std))
    print(f'--cfg-options data_preprocessor.mean=[{means}] data_preprocessor'
          f'.std=[{stds}] model.backbone.in_channels={bands}')
    return mean, std


if __name__ == '__main__':
    main()
