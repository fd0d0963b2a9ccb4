# Copyright (c) mocoplug contributors. All rights reserved.
"""embed.py and embedding_report.py on real digits in class folders, with
a MoCo checkpoint made here (query and key encoders differ)."""
import html.parser
import os.path as osp

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mmcv.transforms import CenterCrop, LoadImageFromFile
from mmengine.config import Config
from mmpretrain.datasets.transforms import ResizeEdge

from mocoplug.evaluation import weighted_knn_accuracy
from mocoplug.registry import MODELS
from ...configs.conftest import config_path

CONFIG = config_path(
    'mocov2/mocov2_smallconv4-w32_1xb64-coslr-15e_digits-folder.py')


@pytest.fixture(scope='module')
def embedded(image_folder, tmp_path_factory):
    """A checkpoint, a broken and a hidden file in the folder, and the
    embeddings of `none` and of the checkpoint."""
    from ...conftest import _load_tool_module
    tmp = tmp_path_factory.mktemp('embed')
    root = tmp / 'images'
    import shutil
    shutil.copytree(image_folder, root)
    (root / 'class_0' / 'broken.png').write_bytes(b'not an image')
    (root / 'class_1' / '._3.png').write_bytes(b'macOS metadata')
    torch.manual_seed(1)
    model = MODELS.build(Config.fromfile(CONFIG).model)
    model.init_weights()
    with torch.no_grad():
        for p in model.momentum_encoder.parameters():
            p.add_(1.)
    ckpt = tmp / 'moco.pth'
    torch.save(dict(state_dict=model.state_dict()), ckpt)
    tool = _load_tool_module('analysis_tools/embed')
    out = {}
    for name, start in (('none', 'none'), ('moco', str(ckpt))):
        out[name] = tool.main([
            CONFIG, start, '--data-root',
            str(root), '--out',
            str(tmp / f'{name}.npz'), '--workers', '0', '--batch-size', '5'
        ])
    return tmp, root, model, out


def test_embeds_every_readable_image_as_the_query_encoder_sees_it(embedded):
    tmp, root, model, out = embedded
    result = dict(np.load(tmp / 'moco.npz'))
    assert result['paths'].tolist() == sorted(
        [f'class_{c}/{n}.png' for c in (0, 1) for n in range(8)])
    assert result['unreadable'].tolist() == ['class_0/broken.png']
    assert 'cannot decode' in result['reasons'][0]
    assert result['backbone'].shape == (16, 256)
    assert result['embedding'].shape == (16, 128)
    assert result['views'].shape == (1, 16, 384)
    # the reference: mmcv's loading and resizing, the config's
    # normalisation written out, the query backbone and its mean-pool
    mean = torch.tensor([123.675, 116.28, 103.53]).view(3, 1, 1)
    std = torch.tensor([58.395, 57.12, 57.375]).view(3, 1, 1)
    model.eval()
    for i in (0, 9, 15):
        info = dict(img_path=str(root / result['paths'][i]))
        for t in (LoadImageFromFile(), ResizeEdge(scale=37, edge='short'),
                  CenterCrop(crop_size=32)):
            info = t(info)
        img = torch.from_numpy(info['img'][..., ::-1].copy())  # to RGB
        x = ((img.permute(2, 0, 1).float() - mean) / std)[None]
        with torch.no_grad():
            feats = model.backbone(x)
            pooled = feats[-1].mean((2, 3))
            projected = model.neck(feats)[0]
        # the same float32 kernels on the same input, batched by 5 or 1:
        # at most a few ulps of the values (|x| < 10) apart
        torch.testing.assert_close(
            torch.from_numpy(result['backbone'][i]),
            pooled[0],
            rtol=1e-5,
            atol=1e-5)
        torch.testing.assert_close(
            torch.from_numpy(result['embedding'][i]),
            projected[0],
            rtol=1e-5,
            atol=1e-5)
    # the key encoder (all its weights + 1) was never read
    none = dict(np.load(tmp / 'none.npz'))
    assert not np.allclose(none['backbone'], result['backbone'])


def test_csv_holds_the_same_rows_read_back_by_chunk(embedded, load_tool):
    tmp, root, _, _ = embedded
    out = tmp / 'moco.csv'
    load_tool('analysis_tools/embed').main([
        CONFIG,
        str(tmp / 'moco.pth'), '--data-root',
        str(root), '--out',
        str(out), '--format', 'csv', '--workers', '0', '--batch-size', '5',
        '--views', '0', '--chunk', '3'
    ])
    rows = [line.split(',') for line in out.read_text().splitlines()]
    npz = np.load(tmp / 'moco.npz')
    assert rows[0][:2] == ['path', 'b0'] and rows[0][-1] == 'e127'
    assert [r[0] for r in rows[1:]] == npz['paths'].tolist()
    values = np.array([[float(x) for x in r[1:]] for r in rows[1:]])
    # 7 significant digits written; the same kernels on batches of 5
    np.testing.assert_allclose(
        values,
        np.concatenate([npz['backbone'], npz['embedding']], 1),
        rtol=1e-5,
        atol=1e-5)
    assert not (tmp / 'moco.csv.parts').exists()


def test_views_across_chunks_and_an_out_without_npz(embedded, load_tool):
    """Two training views in chunks of 3 images: the centre rows are the
    unchunked run's, the views differ from each other, and the file is
    written where --out says (np.savez would add .npz)."""
    tmp, root, _, _ = embedded
    out = tmp / 'chunked'
    load_tool('analysis_tools/embed').main([
        CONFIG,
        str(tmp / 'moco.pth'), '--data-root',
        str(root), '--out',
        str(out), '--workers', '0', '--batch-size', '5', '--views', '2',
        '--chunk', '3'
    ])
    chunked, whole = np.load(out), np.load(tmp / 'moco.npz')
    assert not (tmp / 'chunked.npz').exists()
    assert chunked['views'].shape == (2, 16, 384)
    assert not np.allclose(chunked['views'][0], chunked['views'][1])
    for key in ('backbone', 'embedding'):  # batches of 3 against 5
        np.testing.assert_allclose(
            chunked[key], whole[key], rtol=1e-5, atol=1e-5)
    with pytest.raises(SystemExit):
        load_tool('analysis_tools/embed').main([
            CONFIG, 'none', '--data-root',
            str(root), '--out',
            str(tmp / 'x.npz'), '--chunk', '0'
        ])


def _embed_rank(rank, port, argv):
    import torch.distributed as dist

    from ...conftest import _load_tool_module
    from ...gloo import torchrun_env
    torchrun_env(rank, port)
    _load_tool_module('analysis_tools/embed').main(argv)
    dist.destroy_process_group()


def test_two_cpu_ranks_embed_as_one_process(embedded):
    from ...gloo import free_port, run_two_ranks
    tmp, root, _, _ = embedded
    out = tmp / 'two.npz'
    run_two_ranks(_embed_rank, free_port(), [
        CONFIG,
        str(tmp / 'moco.pth'), '--data-root',
        str(root), '--out',
        str(out), '--workers', '0', '--batch-size', '3', '--views', '0',
        '--chunk', '5', '--launcher', 'pytorch'
    ])  # chunks of 5 images (rows streamed to disk by chunk): 4 of them
    one, two = np.load(tmp / 'moco.npz'), np.load(out)
    assert two['paths'].tolist() == one['paths'].tolist()
    assert int(two['processes']) == 2
    assert not (tmp / 'two.npz.parts').exists()
    for key in ('backbone', 'embedding'):  # per-image kernels, as above
        np.testing.assert_allclose(two[key], one[key], rtol=1e-5, atol=1e-5)


class _Links(html.parser.HTMLParser):

    def __init__(self):
        super().__init__()
        self.images, self.sections = [], []

    def handle_starttag(self, tag, attrs):
        if tag == 'img':
            self.images.append(dict(attrs)['src'])
        if tag == 'section':
            self.sections.append(dict(attrs)['id'])


def test_report_compares_the_two_and_its_figures_are_right(
        embedded, load_tool, tmp_path):
    tmp, _, _, _ = embedded
    summary = load_tool('analysis_tools/embedding_report').main([
        str(tmp / 'none.npz'), '--compare',
        str(tmp / 'moco.npz'), '--out',
        str(tmp_path), '--map-points', '16', '--num-queries', '3'
    ])
    links = _Links()
    links.feed((tmp_path / 'index.html').read_text())
    assert links.sections[:2] == ['neighbours', 'map']
    assert len(links.sections) == 2 + 2 * 3
    assert links.images and all(
        osp.getsize(tmp_path / src) > 100 for src in links.images)
    # 3 queries x 2 files, each with itself and 5 neighbours
    assert sum(src.startswith('thumbs/') for src in links.images) >= 36
    for name, key in (('none.npz (none)', 'none'),
                      ('moco.npz (' + str(tmp / 'moco.pth') + ')', 'moco')):
        data = np.load(tmp / f'{key}.npz')
        unit = F.normalize(torch.from_numpy(data['backbone']), dim=1)
        labels = torch.tensor([int(p[6]) for p in data['paths']])
        expected = weighted_knn_accuracy(unit, labels, unit, labels, 2, (15, ),
                                         0.07, True)['top1_k15']
        assert summary[name]['k'] == 15  # 16 images, less the query
        assert summary[name]['top1'] == pytest.approx(expected)
        sims = (unit @ unit.t()).fill_diagonal_(-2)
        pairs = {(min(i, j), max(i, j))
                 for i, j in enumerate(sims.argmax(1).tolist())
                 if sims[i, j] >= 0.95}
        assert summary[name]['duplicates'] == len(pairs)
        assert len(summary[name]['views']) == 1
        assert 0 <= summary[name]['views'][0] <= 1


CHECK_PAGE = """<!DOCTYPE html><html><body><iframe id="r" src="%s"
width="1200" height="900"></iframe><pre id="result">pending</pre><script>
window.onload = function () {
  var doc = document.getElementById('r').contentDocument;
  var images = Array.from(doc.images);
  var sections = Array.from(doc.querySelectorAll('section')).map(
    function (s) { return [s.id, s.querySelectorAll('img, p').length]; });
  document.getElementById('result').textContent = JSON.stringify({
    images: images.length,
    broken: images.filter(function (i) {
      return !(i.complete && i.naturalWidth > 0); }).map(
      function (i) { return i.getAttribute('src'); }),
    sections: sections});
};
</script></body></html>"""


def browser():
    import shutil
    return next((shutil.which(n)
                 for n in ('chromium', 'chromium-browser', 'google-chrome')
                 if shutil.which(n)), None)


def test_report_in_a_real_browser(embedded, load_tool, tmp_path):
    """Headless Chromium opens the page from disk: every thumbnail and
    figure loads (naturalWidth > 0), no section is empty; a screenshot is
    written beside it. CI installs Chromium (.ci/run)."""
    import json
    import re
    import subprocess
    exe = browser()
    if exe is None:
        pytest.skip('no Chromium: apt-get install chromium (Debian) runs '
                    'the browser test of the report')
    tmp, _, _, _ = embedded
    out = tmp_path / 'report'
    load_tool('analysis_tools/embedding_report').main([
        str(tmp / 'none.npz'), '--compare',
        str(tmp / 'moco.npz'), '--out',
        str(out), '--map-points', '16', '--num-queries', '3'
    ])
    index = (out / 'index.html').as_uri()
    check = tmp_path / 'check.html'
    check.write_text(CHECK_PAGE % index)
    flags = [
        exe, '--headless', '--no-sandbox', '--disable-gpu',
        '--allow-file-access-from-files', '--virtual-time-budget=10000'
    ]

    def report():
        run = subprocess.run(
            flags + ['--dump-dom', check.as_uri()],
            capture_output=True,
            text=True,
            timeout=120)
        found = re.search(r'<pre id="result">(.*?)</pre>', run.stdout, re.S)
        assert found, run.stderr[-2000:]
        return json.loads(found.group(1).replace('&quot;', '"'))

    seen = report()
    assert seen['images'] >= 38 and seen['broken'] == [], seen
    assert [s for s, n in seen['sections'] if n == 0] == [], seen
    subprocess.run(
        flags + [
            f'--screenshot={out / "screenshot.png"}', '--window-size=1200,900',
            index
        ],
        capture_output=True,
        timeout=120)
    assert (out / 'screenshot.png').stat().st_size > 10000
    thumb = next(out.glob('thumbs/*.png'))
    thumb.unlink()
    assert set(report()['broken']) == {'thumbs/' + thumb.name}


def test_the_map_is_umap_where_umap_learn_is_installed(embedded, load_tool,
                                                       tmp_path, monkeypatch):
    """umap-learn is not in the tested stack: a stand-in ``umap`` module
    records how the report calls ``UMAP`` (its documented arguments) and
    projects on two coordinates; without it, scikit-learn's t-SNE."""
    import sys
    import types
    tmp, _, _, _ = embedded
    calls = []

    class UMAP:

        def __init__(self, **kwargs):
            calls.append(kwargs)

        def fit_transform(self, x):
            calls.append(x.shape)
            return x[:, :2]

    monkeypatch.setitem(sys.modules, 'umap', types.SimpleNamespace(UMAP=UMAP))
    load_tool('analysis_tools/embedding_report').main([
        str(tmp / 'moco.npz'), '--out',
        str(tmp_path), '--map-points', '16', '--num-queries', '3'
    ])
    assert calls[0] == dict(n_neighbors=15, random_state=0)
    assert calls[1][0] == 16
    assert (tmp_path / 'map_0.png').stat().st_size > 100
