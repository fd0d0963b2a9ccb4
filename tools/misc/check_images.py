# Copyright (c) mocoplug contributors. All rights reserved.
"""List the images of a folder that mmcv.imfrombytes cannot decode (the
files CustomDataset loads), in parallel. Exit status: 0 all decode, 1 some
do not, or none is there, or a symlink loop; 2 usage error."""
import argparse
import os
import sys
from functools import partial
from typing import List, Optional

from mmengine.utils import track_parallel_progress, track_progress

from mocoplug.datasets.image_check import (IMAGE_EXTENSIONS, check_image,
                                           find_images, quiet_decoder_warnings)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='undecodable images')
    parser.add_argument('folder', help='searched recursively')
    parser.add_argument('--workers', type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        '--backend',
        default='cv2',
        choices=['cv2', 'pillow', 'turbojpeg', 'tifffile'],
        help="the pipeline's imdecode_backend")
    parser.add_argument(
        '--color-type', default='color', help="the pipeline's color_type")
    parser.add_argument(
        '--extensions', nargs='+', default=list(IMAGE_EXTENSIONS))
    parser.add_argument('--out', help='the unreadable files: PATH<TAB>REASON')
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if not os.path.isdir(args.folder):
        print(
            f'check_images: {args.folder!r} is not a folder', file=sys.stderr)
        return 2
    if args.workers < 1:
        print('check_images: --workers must be >= 1', file=sys.stderr)
        return 2
    try:
        paths = find_images(args.folder, args.extensions)
    except ValueError as loop:
        print(f'check_images: {loop}', file=sys.stderr)
        return 1
    if not paths:
        print(
            f'check_images: no image under {args.folder!r} (extensions '
            f'{", ".join(args.extensions)})',
            file=sys.stderr)
        return 1
    print(f'checking {len(paths)} images under {args.folder} '
          f'({args.backend}, {args.workers} workers)')
    check = partial(
        check_image, backend=args.backend, color_type=args.color_type)
    if args.workers == 1:
        quiet_decoder_warnings()
        reasons = track_progress(check, paths)
    else:
        reasons = track_parallel_progress(
            check,
            paths,
            nproc=min(args.workers, len(paths)),
            initializer=quiet_decoder_warnings,
            chunksize=max(1, min(64,
                                 len(paths) // (4 * args.workers))))
    bad = [(p, r) for p, r in zip(paths, reasons) if r is not None]
    print()
    for path, reason in bad:
        print(f'{path}: {reason}')
    print(f'{len(bad)} of {len(paths)} images cannot be decoded' +
          ('' if bad else ': all good'))
    if args.out:
        with open(args.out, 'w') as f:
            f.writelines(f'{p}\t{r}\n' for p, r in bad)
        print(f'list written to {args.out}')
    if bad:
        print('Remove or replace them before training, or train with '
              'skip_unreadable=True on CheckedLoadImageFromFile.')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
