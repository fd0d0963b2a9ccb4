# Copyright (c) mocoplug contributors. All rights reserved.
"""A static page of what an embedding file of embed.py shows, opened from
disk (no server, nothing fetched): nearest neighbours, a 2-D map, near
duplicates and outliers; the share of each image's neighbours that its
training view keeps; with --compare a second file side by side (random
init against MoCo, released against continued); weighted kNN accuracy and
the most confused classes where the folder has one sub-folder per class."""
import argparse
import html
import os
import os.path as osp
from collections import Counter
from typing import Dict, List

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from mocoplug.evaluation import nearest_neighbours, weighted_votes

KNN = dict(k=20, temperature=0.07)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('file', help='an .npz of embed.py')
    parser.add_argument('--compare', help='a second .npz of the same folder')
    parser.add_argument('--out', required=True, help='folder of the page')
    parser.add_argument(
        '--features', choices=('backbone', 'embedding'), default='backbone')
    parser.add_argument('--k', type=int, default=5, help='neighbours shown')
    parser.add_argument('--queries', nargs='+', help='paths (default: seeded)')
    parser.add_argument('--num-queries', type=int, default=8)
    parser.add_argument('--duplicate', type=float, default=0.95)
    parser.add_argument('--map-points', type=int, default=300)
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args(argv)


def load(path: str, features: str) -> dict:
    data = dict(np.load(path))
    data['views'] = np.split(data['views'], [data['width']],
                             2)[features == 'embedding']
    if not len(data['paths']):
        raise SystemExit(f'{path}: no image was embedded')
    data['unit'] = F.normalize(torch.from_numpy(data[features]).float(), dim=1)
    data['name'] = f"{osp.basename(path)} ({data['checkpoint']})"
    data['label'] = osp.splitext(osp.basename(path))[0][:14]
    return data


def neighbours(unit: torch.Tensor, k: int, query=None, labels=None):
    """Each image's (or ``query`` rows') k nearest other images."""
    ids = torch.arange(unit.shape[0])
    return nearest_neighbours(
        unit if query is None else query,
        unit,
        ids,
        torch.zeros_like(ids) if labels is None else labels,
        k,
        query_ids=ids)


def view_agreement(data: dict, own: torch.Tensor) -> List[float]:
    """Per training view: the mean share of an image's nearest neighbours
    ``own`` (ids) that are among the nearest of its view (self excluded)."""
    moved = (
        F.normalize(torch.from_numpy(v).float(), dim=1) for v in data['views'])
    found = (neighbours(data['unit'], own.shape[1], m).ids for m in moved)
    return [(own.unsqueeze(2) == f.unsqueeze(1)).any(2).float().mean().item()
            for f in found]


def class_figures(data: dict) -> dict:
    """Weighted kNN top-1 (leave-one-out) and confused pairs where every
    path lies in a class folder, of 2 or more; else empty."""
    parts = [p.split('/', 1) for p in data['paths']]
    classes = sorted({p[0] for p in parts})
    if any(len(p) < 2 for p in parts) or len(classes) < 2:
        return {}
    labels = torch.tensor([classes.index(p[0]) for p in parts])
    k = min(KNN['k'], len(labels) - 1)
    found = neighbours(data['unit'], k, labels=labels)
    pred = weighted_votes(found, k, len(classes), KNN['temperature']).argmax(1)
    wrong = Counter((classes[a], classes[b])
                    for a, b in zip(labels.tolist(), pred.tolist()) if a != b)
    top1 = (pred == labels).float().mean().item() * 100
    return dict(top1=top1, k=k, confused=wrong)


class Page:
    """index.html and its thumbnails under ``out``."""

    def __init__(self, out: str, root: str) -> None:
        self.out, self.root, self.parts = out, root, []
        os.makedirs(osp.join(out, 'thumbs'), exist_ok=True)

    def thumb(self, rel: str, caption: str = '') -> str:
        name = 'thumbs/' + rel.replace('/', '__') + '.png'
        if not osp.exists(osp.join(self.out, name)):
            with Image.open(osp.join(self.root, rel)) as img:
                img = img.convert('RGB')
                img.thumbnail((96, 96))
                img.save(osp.join(self.out, name))
        return (f'<figure><img src="{html.escape(name)}" alt="'
                f'{html.escape(rel)}" width="64"><figcaption>'
                f'{html.escape(caption)}</figcaption></figure>')

    def section(self, title: str, body: str) -> None:
        slug = ''.join(c for c in title.split()[0].lower() if c.isalpha())
        self.parts.append(f'<section id="{slug}"><h2>'
                          f'{html.escape(title)}</h2>{body}</section>')

    def write(self, title: str) -> str:
        path = osp.join(self.out, 'index.html')
        with open(path, 'w') as f:
            f.write(
                '<!DOCTYPE html><html><head><meta charset="utf-8"><title>'
                f'{html.escape(title)}</title><style>figure{{display:inline-'
                'block;margin:2px;font-size:10px;text-align:center}}.run{{'
                'display:inline-block;margin-right:24px}}'
                '</style></head><body><h1>' + html.escape(title) + '</h1>' +
                ''.join(self.parts) + '</body></html>')
        return path


def map_figure(data: dict, out: str, points: int, seed: int, name: str) -> str:
    """UMAP (where umap-learn is installed) or scikit-learn's t-SNE of up
    to ``points`` images, drawn with their thumbnails."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.offsetbox import AnnotationBbox, OffsetImage
    from sklearn.manifold import TSNE
    pick = np.random.default_rng(seed).permutation(len(data['paths']))
    pick = np.sort(pick[:points])
    try:
        from umap import UMAP
        method = 'UMAP', UMAP(
            n_neighbors=min(15, max(2, pick.size - 1)), random_state=seed)
    except ImportError:
        method = 't-SNE', TSNE(
            perplexity=min(30., (pick.size - 1) / 3),
            init='pca',
            random_state=seed)
    xy = method[1].fit_transform(data['unit'][pick].numpy())
    fig, ax = plt.subplots(figsize=(8, 8))
    ax.scatter(xy[:, 0], xy[:, 1], s=2)
    for (x, y), i in zip(xy, pick):
        with Image.open(osp.join(str(data['root']), data['paths'][i])) as im:
            im = im.convert('RGB')
            im.thumbnail((24, 24))
            ax.add_artist(
                AnnotationBbox(
                    OffsetImage(np.asarray(im)), (x, y), frameon=False))
    ax.set_title(f"{method[0]} of {len(pick)} images, {data['name']}")
    ax.set_axis_off()
    fig.savefig(osp.join(out, name), dpi=80, bbox_inches='tight')
    plt.close(fig)
    return name


def main(argv=None) -> Dict:
    args = parse_args(argv)
    runs = [load(args.file, args.features)]
    if args.compare:
        runs.append(load(args.compare, args.features))
        if not np.array_equal(runs[0]['paths'], runs[1]['paths']):
            raise SystemExit(f'{args.file} and {args.compare} embed other '
                             'images: embed the same folder with both')
    paths, root = runs[0]['paths'], str(runs[0]['root'])
    page = Page(args.out, root)
    found = [neighbours(r['unit'], args.k) for r in runs]
    if args.queries:
        missing = [q for q in args.queries if q not in paths]
        if missing:
            raise SystemExit(f'--queries not in the file: {missing}')
        queries = [paths.tolist().index(q) for q in args.queries]
    else:
        pick = np.random.default_rng(args.seed).permutation(len(paths))
        queries = sorted(pick[:args.num_queries].tolist())
    rows = ''.join('<div class="row">' + ''.join(
        f'<span class="run">{page.thumb(paths[q], r["label"])}' + ''.join(
            page.thumb(paths[i], f'{s:.3f}')
            for s, i in zip(f.sims[q].tolist(), f.ids[q].tolist())) + '</span>'
        for r, f in zip(runs, found)) + '</div>' for q in queries)
    heads = ' | '.join(html.escape(r['name']) for r in runs)
    page.section('Neighbours: query, then its nearest images (cosine)',
                 f'<p>{heads}</p>' + rows)
    page.section(
        'Map of the folder', ''.join('<img src="' + map_figure(
            r, args.out, args.map_points, args.seed, f'map_{i}.png') +
                                     '" alt="map" width="480">'
                                     for i, r in enumerate(runs)))
    summary = {}
    for run, f in zip(runs, found):
        top, nearest = f.sims[:, 0], f.ids[:, 0].tolist()
        pairs = sorted({(min(i, j), max(i, j))
                        for i, (s, j) in enumerate(zip(top.tolist(), nearest))
                        if s >= args.duplicate})
        lonely = top.argsort()[:8].tolist()
        views = view_agreement(run, f.ids)
        classes = class_figures(run)
        summary[run['name']] = dict(
            duplicates=len(pairs), views=views, **classes)
        page.section(
            f'Duplicates above cosine {args.duplicate} ({run["name"]}): '
            f'{len(pairs)} pairs',
            ''.join('<div class="row">' + page.thumb(paths[i]) +
                    page.thumb(paths[j]) + '</div>' for i, j in pairs[:12]))
        page.section(
            f'Outliers: the farthest from any other image ({run["name"]})',
            ''.join(
                page.thumb(paths[i], f'{top[i].item():.3f}') for i in lonely))
        text = (f'<p>{run["name"]}: of the {args.k} nearest neighbours of an '
                'image, a share of ' + ', '.join(f'{v:.3f}' for v in views) +
                ' stays among those of one training view of it (one figure '
                'per view of embed.py --views)</p>') if views else ''
        if classes:
            text += (f'<p>weighted kNN top-1 (leave-one-out, k={classes["k"]},'
                     f' t={KNN["temperature"]}): {classes["top1"]:.2f}%; most '
                     'confused (class, taken for): ' + ', '.join(
                         f'{a} as {b} ({n})'
                         for (a, b), n in classes['confused'].most_common(5)) +
                     '</p>')
        page.section(f'Figures ({run["name"]})', text or '<p>none</p>')
    index = page.write('What the encoder puts together: ' +
                       ' vs '.join(r['name'] for r in runs))
    for name, figures in summary.items():
        print(name, {k: v for k, v in figures.items() if k != 'confused'})
    print(f'wrote {index}')
    return summary


if __name__ == '__main__':
    main()
