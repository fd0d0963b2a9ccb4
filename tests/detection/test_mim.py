# Copyright (c) mocoplug contributors. All rights reserved.
"""`mim train mmdet CONFIG --cfg-options pretrained=CKPT` with a shipped
detection config (VOC C4, tiny data, 2 iterations on CPU): mmdet's own
tools/train.py builds the config's runner, which loads the query encoder
into the backbone and the res5 head."""
import pytest
from mmengine.config import Config

from ..mim_install import run_mim
from .conftest import VOC_C4, dump, shrink_detection_cfg

pytest.importorskip(
    'mim',
    reason='openmim is not installed (pip install colorama pandas requests '
    'tabulate && pip install --no-deps openmim==0.3.9)')


def test_mim_train_mmdet(tiny_det_data, mocov2_r50_checkpoint, tmp_path):
    cfg = shrink_detection_cfg(
        Config.fromfile(VOC_C4), tiny_det_data, str(tmp_path))
    path = dump(cfg, str(tmp_path / 'voc.py'))
    result = run_mim([
        'train', 'mmdet', path, '--gpus', '0', '--cfg-options',
        f'pretrained={mocov2_r50_checkpoint}'
    ])
    log = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, log
    assert 'mmdet/.mim/tools/train.py' in result.stdout
    log = next(tmp_path.glob('*/*.log')).read_text()
    assert 'ResNet loaded 258/258 tensors' in log
    assert 'ResLayerExtraNorm loaded 60/65 tensors' in log
    assert (tmp_path / 'iter_2.pth').is_file()
