# Copyright (c) mocoplug contributors. All rights reserved.
import json

import pytest

from mocoplug.engine.hooks.representation_health_hook import HEALTH_SCALARS
from mocoplug.visualization.scalar_curves import PANELS, panel_lines, series


def write_scalars(folder):
    vis = folder / '20260101_000000' / 'vis_data'
    vis.mkdir(parents=True)
    records = [
        dict(lr=0.1, loss=5.0, contrast_acc=10.0, momentum=0.99, step=1),
        dict(lr=0.05, loss=4.0, contrast_acc=30.0, momentum=0.995, step=2),
        {
            'knn/top1_k20': 50.0,
            'knn/top1_k200': 40.0,
            'step': 2
        },
    ]
    (vis /
     'scalars.json').write_text('\n'.join(json.dumps(r)
                                          for r in records) + '\n')
    return records


def test_series_extracts_values_per_step(tmp_path):
    records = write_scalars(tmp_path)
    assert series(records, 'loss') == {'loss': ([1, 2], [5.0, 4.0])}
    assert series(records, 'knn/') == {
        'knn/top1_k20': ([2], [50.0]),
        'knn/top1_k200': ([2], [40.0])
    }


def test_tool_writes_one_png_per_metric(tmp_path, load_tool):
    write_scalars(tmp_path)
    written = load_tool('analysis_tools/plot_curves').main(
        [str(tmp_path), '--out', str(tmp_path / 'png')])
    names = sorted(p.rsplit('/', 1)[-1] for p in written)
    assert names == [
        'contrast_acc.png', 'knn.png', 'loss.png', 'lr.png', 'momentum.png'
    ]
    for path in written:
        with open(path, 'rb') as f:
            assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_missing_log_is_a_clear_error(tmp_path, load_tool):
    with pytest.raises(FileNotFoundError, match='scalars.json'):
        load_tool('analysis_tools/plot_curves').main([str(tmp_path)])


def test_health_figures_are_drawn(tmp_path, load_tool):
    """Every scalar of RepresentationHealthHook has a panel; panels with
    several metrics name them in the legend."""
    drawn = {key for _, _, keys in PANELS for key in keys}
    assert {f'health/{name}' for name in HEALTH_SCALARS} <= drawn
    vis = tmp_path / '20260101_000000' / 'vis_data'
    vis.mkdir(parents=True)
    records = [
        dict(
            {
                f'health/{name}': 0.1 * i + n
                for n, name in enumerate(HEALTH_SCALARS)
            },
            loss=5.0 - i,
            step=10 * i) for i in (1, 2)
    ]
    (vis /
     'scalars.json').write_text('\n'.join(json.dumps(r)
                                          for r in records) + '\n')
    assert panel_lines({'run': records},
                       ('health/alignment', 'health/uniformity')) == [
                           ('run health/alignment', [10, 20], [2.1, 2.2]),
                           ('run health/uniformity', [10, 20], [3.1, 3.2]),
                       ]
    assert panel_lines({'': records},
                       ('health/std', )) == [('', [10, 20], [0.1, 0.2])]
    written = load_tool('analysis_tools/plot_curves').main(
        [str(tmp_path), '--out', str(tmp_path / 'png')])
    names = sorted(p.rsplit('/', 1)[-1] for p in written)
    assert names == [
        'health_alignment_uniformity.png', 'health_key_query_dist.png',
        'health_queue_age.png', 'health_similarity.png', 'health_std.png',
        'health_std_norm.png', 'loss.png'
    ]
    for path in written:
        with open(path, 'rb') as f:
            assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_runs_with_the_same_folder_name_stay_apart(tmp_path, load_tool,
                                                   monkeypatch):
    """a/mocov2 and b/mocov2 were both labelled 'mocov2': one dict key, one
    line drawn for two runs."""
    tool = load_tool('analysis_tools/plot_curves')
    drawn = {}
    monkeypatch.setattr(tool, 'plot_scalar_curves',
                        lambda runs, out: drawn.update(runs) or ['x.png'])
    for name in ('a', 'b'):
        write_scalars(tmp_path / name / 'mocov2')
    runs = [str(tmp_path / n / 'mocov2') for n in ('a', 'b')]
    tool.main(runs)
    assert sorted(drawn) == ['a/mocov2', 'b/mocov2']
    with pytest.raises(SystemExit, match='given twice'):
        tool.main([runs[0], runs[0] + '/'])
    with pytest.raises(SystemExit, match='one distinct label per run'):
        tool.main(runs + ['--labels', 'same', 'same'])
