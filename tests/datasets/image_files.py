# Copyright (c) mocoplug contributors. All rights reserved.
"""Small good and broken image files for the unreadable-image tests."""
import io
import struct
import zlib
from pathlib import Path
from typing import Dict

import numpy as np
from PIL import Image


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xffffffff
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', crc)


def zero_size_png() -> bytes:
    """A PNG whose header declares a 0x0 image, and no pixel data."""
    header = struct.pack('>IIBBBBB', 0, 0, 8, 2, 0, 0, 0)
    return (b'\x89PNG\r\n\x1a\n' + _png_chunk(b'IHDR', header) +
            _png_chunk(b'IEND', b''))


def jpeg_bytes(seed: int, size: int = 24) -> bytes:
    pixels = np.random.default_rng(seed).integers(
        0, 256, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, 'JPEG', quality=90)
    return buf.getvalue()


BROKEN = ('empty.jpg', 'truncated.jpg', 'text.jpg', 'zero_size.png')


def write_images(root: Path, num_good: int = 4) -> Dict[str, Path]:
    """Write ``num_good`` good images (PNG and JPEG, half in a sub-folder)
    and one file of each broken kind under ``root``; return name -> path."""
    files = {}
    sub = root / 'sub'
    sub.mkdir(parents=True, exist_ok=True)
    for i in range(num_good):
        folder = sub if i % 2 else root
        if i % 2:
            path = folder / f'good_{i}.png'
            pixels = np.full((24, 20, 3), 40 * i, dtype=np.uint8)
            Image.fromarray(pixels).save(path)
        else:
            path = folder / f'good_{i}.jpg'
            path.write_bytes(jpeg_bytes(i))
        files[path.name] = path
    broken = {
        'empty.jpg': b'',
        'truncated.jpg': jpeg_bytes(99)[:300],
        'text.jpg': b'this is a text file, not an image\n',
        'zero_size.png': zero_size_png(),
    }
    for name, data in broken.items():
        (sub / name).write_bytes(data)
        files[name] = sub / name
    return files
