# Copyright (c) mocoplug contributors. All rights reserved.
"""Training curves from LocalVisBackend's ``vis_data/scalars.json``."""
import glob
import json
import os
import os.path as osp
from typing import Dict, List, Sequence

# (file name, title, keys drawn on it); 'knn/' matches every kNN metric.
PANELS = (
    ('loss.png', 'InfoNCE loss', ('loss', )),
    ('contrast_acc.png', 'contrastive top-1 accuracy (%)', ('contrast_acc', )),
    ('lr.png', 'learning rate', ('lr', )),
    ('momentum.png', 'key-encoder momentum m', ('momentum', )),
    ('knn.png', 'weighted kNN top-1 (%)', ('knn/', )),
    ('health_std.png', 'std of L2-normalised queries per dim (~1/sqrt(d); '
     'collapse: 0)', ('health/std', )),
    ('health_std_norm.png', 'std x sqrt(d) (healthy ~1, collapse 0)',
     ('health/std_norm', )),
    ('health_alignment_uniformity.png',
     'alignment (lower: closer positives), uniformity (lower: more spread)',
     ('health/alignment', 'health/uniformity')),
    ('health_similarity.png', 'mean cosine with positive / negative keys',
     ('health/pos_sim', 'health/neg_sim')),
    ('health_key_query_dist.png',
     'key encoder distance ||theta_k - theta_q|| / ||theta_q||',
     ('health/key_query_dist', )),
    ('health_queue_age.png', 'age of the oldest queued key (iterations)',
     ('health/queue_age', )),
)


def load_scalars(path: str) -> List[dict]:
    """The scalar records of a work dir's latest run or a scalars.json."""
    found = [path] if osp.isfile(path) else sorted(
        glob.glob(osp.join(path, '*', 'vis_data', 'scalars.json')) +
        glob.glob(osp.join(path, 'vis_data', 'scalars.json')))
    if not found:
        raise FileNotFoundError(
            f'No vis_data/scalars.json under {path!r}: pass a work dir of a '
            'training run (with the default LocalVisBackend) or the file')
    with open(found[-1]) as f:
        return [json.loads(line) for line in f if line.strip()]


def series(records: Sequence[dict], key: str) -> Dict[str, tuple]:
    """``{metric: (steps, values)}`` for every metric named ``key`` or, when
    ``key`` ends with '/', starting with it."""
    out: Dict[str, tuple] = {}
    for rec in records:
        for name, value in rec.items():
            if name == key or (key.endswith('/') and name.startswith(key)):
                steps, values = out.setdefault(name, ([], []))
                steps.append(rec.get('step', rec.get('iter', len(steps))))
                values.append(value)
    return out


def panel_lines(runs: Dict[str, Sequence[dict]],
                keys: Sequence[str]) -> List[tuple]:
    """The ``(legend label, steps, values)`` lines of one panel, one per
    run and metric (named when the panel has several)."""
    return [((f'{label} {name}' if key.endswith('/') or len(keys) > 1 else
              f'{label}').strip(), steps, values)
            for label, records in runs.items() for key in keys
            for name, (steps, values) in series(records, key).items()]


def plot_scalar_curves(runs: Dict[str, Sequence[dict]],
                       out_dir: str) -> List[str]:
    """One PNG per logged metric in ``out_dir``, one line per run of
    ``runs`` (``{label: records}``) and kNN k; returns the paths."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for filename, title, keys in PANELS:
        lines = panel_lines(runs, keys)
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, steps, values in lines:
            marker = 'o' if len(steps) < 30 else None
            ax.plot(steps, values, label=label or None, marker=marker)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel('iteration')
        ax.grid(alpha=0.3)
        if any(label for label, _, _ in lines):
            ax.legend()
        fig.tight_layout()
        written.append(osp.join(out_dir, filename))
        fig.savefig(written[-1], dpi=100)
        plt.close(fig)
    return written
