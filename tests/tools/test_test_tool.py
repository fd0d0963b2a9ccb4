# Copyright (c) mocoplug contributors. All rights reserved.
"""tools/test.py: the metrics file is written once, by rank 0 (every rank
used to write it: truncations racing one another)."""
import json
import os

import pytest

LINEAR = os.path.join(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    'configs', 'benchmarks', 'linear_r50_8xb32-steplr-100e_in1k.py')


class _Runner:

    def test(self):
        return {'accuracy/top1': 50.0}


@pytest.mark.parametrize('rank', [0, 1])
def test_out_is_written_by_rank_0_only(load_tool, tmp_path, monkeypatch, rank):
    tool = load_tool('test')
    monkeypatch.setattr(tool.train, 'build_runner', lambda cfg: _Runner())
    monkeypatch.setattr(tool, 'get_rank', lambda: rank)
    out = tmp_path / 'metrics.json'
    metrics = tool.main(
        [LINEAR, 'ckpt.pth', '--out',
         str(out), '--work-dir',
         str(tmp_path)])
    assert metrics == {'accuracy/top1': 50.0}
    assert out.exists() == (rank == 0)
    if rank == 0:
        assert json.loads(out.read_text()) == {'accuracy/top1': 50.0}
