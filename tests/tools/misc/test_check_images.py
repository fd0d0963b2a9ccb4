# Copyright (c) mocoplug contributors. All rights reserved.
import pytest

from ...datasets.image_files import BROKEN, write_images


@pytest.fixture
def check_images(load_tool):
    return load_tool('misc/check_images').main


def test_lists_every_unreadable_file(check_images, tmp_path, capsys):
    root = tmp_path / 'images'
    files = write_images(root, num_good=4)
    (root / 'notes.txt').write_text('not an image extension: not checked')
    out = tmp_path / 'bad.txt'
    assert check_images([str(root), '--workers', '2', '--out', str(out)]) == 1
    lines = out.read_text().splitlines()
    listed = dict(line.split('\t') for line in lines)
    assert sorted(listed) == sorted(str(files[n]) for n in BROKEN)
    assert listed[str(files['empty.jpg'])] == 'the file is empty (0 bytes)'
    for name in ('truncated.jpg', 'text.jpg', 'zero_size.png'):
        assert listed[str(files[name])].startswith('cv2 cannot decode it')
    printed = capsys.readouterr().out
    assert 'checking 8 images' in printed
    assert '4 of 8 images cannot be decoded' in printed
    for name in BROKEN:
        assert f'{files[name]}: ' in printed


def test_all_good_exits_0(check_images, tmp_path, capsys):
    files = write_images(tmp_path, num_good=3)
    for name in BROKEN:
        files[name].unlink()
    out = tmp_path / 'bad.txt'
    assert check_images([str(tmp_path), '--workers', '1', '--out',
                         str(out)]) == 0
    assert out.read_text() == ''
    assert '0 of 3 images cannot be decoded: all good' in \
        capsys.readouterr().out


def test_other_backend_and_usage_errors(check_images, tmp_path, capsys):
    files = write_images(tmp_path, num_good=1)
    out = tmp_path / 'bad.txt'
    assert check_images([
        str(tmp_path), '--backend', 'pillow', '--out',
        str(out), '--workers', '2'
    ]) == 1
    listed = dict(line.split('\t') for line in out.read_text().splitlines())
    assert listed[str(files['truncated.jpg'])] == (
        'pillow cannot decode it (OSError: Truncated File Read; 300 bytes)')
    assert check_images([str(tmp_path / 'missing')]) == 2
    assert 'is not a folder' in capsys.readouterr().err


def test_agrees_with_the_dataset_on_what_it_loads(check_images, tmp_path,
                                                  capsys):
    """mmpretrain's CustomDataset (through mmengine's listing) skips hidden
    files (macOS's ._x.png) but reads hidden folders; a folder with no
    image is not 'all good'; a symlink loop, which the dataset follows
    without end, is named."""
    import os

    from mmpretrain.datasets import CustomDataset
    files = write_images(tmp_path / 'd', num_good=2)
    for name in BROKEN:
        files[name].unlink()
    good = next(p for n, p in files.items() if n.startswith('good'))
    (tmp_path / 'd' / f'._{good.name}').write_bytes(b'resource fork')
    (tmp_path / 'd' / '.ipynb_checkpoints').mkdir()
    os.link(good, tmp_path / 'd' / '.ipynb_checkpoints' / f'copy{good.suffix}')
    dataset = CustomDataset(
        data_root=str(tmp_path / 'd'), with_label=False, pipeline=[])
    loaded = sorted(
        dataset.get_data_info(i)['img_path'] for i in range(len(dataset)))
    assert check_images([str(tmp_path / 'd'), '--workers', '1']) == 0
    printed = capsys.readouterr().out
    assert f'checking {len(loaded)} images' in printed and len(loaded) == 3
    (tmp_path / 'empty').mkdir()
    assert check_images([str(tmp_path / 'empty')]) == 1
    assert 'no image under' in capsys.readouterr().err
    os.symlink(tmp_path / 'd', tmp_path / 'd' / 'loop')
    assert check_images([str(tmp_path / 'd')]) == 1
    assert 'links back to' in capsys.readouterr().err
