# Copyright (c) mocoplug contributors. All rights reserved.
"""The embedded demo: MoCo v2 pretrained without labels on scikit-learn's
digits, against raw pixels and random init (kNN, linear probe with 1%/10% of
the labels, clean and perturbed); prints the tables, writes results.json/png
and the embedding report of the held-out digits (random init vs MoCo)."""
import argparse
import copy
import json
import os
import os.path as osp
import time
import warnings
from runpy import run_path
from typing import Dict, List, Sequence

import numpy as np
import torch
from mmengine.config import Config
from mmengine.dataset import default_collate
from mmengine.hooks import Hook
from mmengine.registry import RUNNERS, DefaultScope
from mmengine.runner import set_random_seed
from torch.utils.data import DataLoader

import mocoplug  # noqa: F401
from mocoplug.datasets import write_digits_folder
from mocoplug.engine.hooks import KNNMonitorHook
from mocoplug.evaluation import (extract_features, linear_probe_accuracy,
                                 stratified_label_subsets,
                                 weighted_knn_accuracy)
from mocoplug.models.utils import precise_bn_stats
from mocoplug.registry import DATASETS, MODELS
from mocoplug.visualization import load_scalars, plot_results_figure
from mocoplug.visualization.scalar_curves import series

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG = osp.join(
    ROOT, 'configs',
    'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')
DEVICE_AUGMENT_CONFIG = CONFIG.replace('.py', '_device-aug.py')
KNN = dict(k=20, temperature=0.07)
LABEL_FRACTIONS = {0.01: 10, 0.1: 3}
PERTURBATION = dict(
    type='FixedRandomAffine',
    degrees=20,
    translate=0.1,
    scale=(0.8, 1.2),
    contrast=(0.5, 1.5),
    seed=0)
RAW, RANDOM, MOCO = 'raw pixels', 'random init', 'MoCo v2'
TEST_SETS = ('clean', 'perturbed')


class EpochPrinter(Hook):
    """A console line after the first epoch and each kNN evaluation."""
    priority = 'LOWEST'

    def __init__(self, label: str):
        self.label = label

    def before_train(self, runner):
        self.start = time.time()

    def after_train_epoch(self, runner):
        hooks = [h for h in runner.hooks if isinstance(h, KNNMonitorHook)]
        knn = hooks[0].last_metrics if hooks else {}
        if runner.epoch > 0 and not knn:
            return
        n = len(runner.train_dataloader)
        hub = runner.message_hub
        loss = hub.get_scalar('train/loss').mean(n)
        acc = hub.get_scalar('train/contrast_acc').mean(n)
        knn_text = '  '.join(f'kNN {k} {v:.1f}%' for k, v in knn.items())
        print(
            f'  [{self.label}] epoch {runner.epoch + 1:>2}/'
            f'{runner.max_epochs}  loss {loss:.3f}  contrastive acc '
            f'{acc:5.1f}%  {knn_text}  ({time.time() - self.start:.0f}s)',
            flush=True)
        for hook in hooks:  # print each kNN figure once
            hook.last_metrics = {}


def pretrain(cfg: Config, seed: int, work_dir: str):
    """Pretrain MoCo with ``seed`` on every core (unless OMP_NUM_THREADS is
    set); return the model and its scalars log."""
    torch.set_num_threads(
        int(os.environ.get('OMP_NUM_THREADS') or os.cpu_count() or 1))
    cfg = copy.deepcopy(cfg)
    cfg.work_dir = work_dir
    cfg.randomness, cfg.log_level = dict(seed=seed), 'WARNING'
    runner = RUNNERS.build(cfg)  # the config's runner_type
    runner.register_hook(EpochPrinter(f'seed {seed}'))
    runner.train()
    return runner.model, load_scalars(work_dir)


def digits_loader(split: str,
                  perturbed: bool = False,
                  dataset: str = 'DigitsDataset') -> DataLoader:
    pipeline = ([PERTURBATION]
                if perturbed else []) + [dict(type='PackInputs')]
    return loader(dict(type=dataset, split=split, pipeline=pipeline))


def loader(dataset: dict) -> DataLoader:
    """Batches of 256 of ``DATASETS.build(dataset)``, in order."""
    return DataLoader(
        DATASETS.build(dataset), batch_size=256, collate_fn=default_collate)


def estimate_bn_statistics(model, loader: DataLoader) -> None:
    """BN running statistics: their exact average over the loader."""
    model.train()
    precise_bn_stats(
        model,
        loader,
        len(loader),
        forward=lambda data: model.backbone(
            model.data_preprocessor(data, False)['inputs']))
    model.eval()


def encode(model,
           feature_fn=None,
           dataset: str = 'DigitsDataset',
           memory: str = 'train') -> Dict[str, tuple]:
    """(features, labels) of the ``memory`` split (as ``train``) and of the
    held-out ``test`` split, clean and perturbed."""
    sets = dict(
        train=(memory, False), clean=('test', False), perturbed=('test', True))
    return {
        name: extract_features(model, digits_loader(*split, dataset),
                               feature_fn)
        for name, split in sets.items()
    }


def knn_figures(feats: Dict[str, tuple],
                num_classes: int = 10,
                names: Sequence[str] = TEST_SETS) -> Dict[str, float]:
    """Weighted kNN top-1 (%) of the ``names`` sets, ``train`` as memory."""
    bank, bank_labels = feats['train']
    return {
        name:
        weighted_knn_accuracy(*feats[name], bank, bank_labels, num_classes,
                              (KNN['k'], ),
                              KNN['temperature'])[f'top1_k{KNN["k"]}']
        for name in names
    }


def label_efficiency(feats: Dict[str, tuple],
                     fractions: dict = LABEL_FRACTIONS) -> Dict[str, dict]:
    """``{'1%': {'clean': [accuracy per draw], 'perturbed': [...]}, ...}``
    of a logistic regression on stratified label draws (seed 0)."""
    train, labels = feats['train']
    out = {}
    for fraction, draws in fractions.items():
        subsets = stratified_label_subsets(labels, fraction, draws, seed=0)
        out[f'{fraction:.0%}'] = linear_probe_accuracy(
            train, labels, {name: feats[name]
                            for name in TEST_SETS}, subsets)
    return out


def mean_spread(values: Sequence[float]) -> Dict[str, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    values = np.asarray(values, dtype=np.float64)
    std = values.std(ddof=1) if len(values) > 1 else 0.
    return dict(mean=float(values.mean()), std=float(std), n=len(values))


def summarise(per_encoder: Dict[str, List[dict]]) -> Dict[str, dict]:
    """Each encoder's per-seed nested dicts (leaves: numbers or lists of
    them) pooled into a :func:`mean_spread` per leaf."""

    def collect(items):
        if isinstance(items[0], dict):
            return {k: collect([item[k] for item in items]) for k in items[0]}
        flat = [v for item in items for v in np.atleast_1d(item)]
        return mean_spread(flat)

    return {name: collect(runs) for name, runs in per_encoder.items()}


def format_tables(summary: Dict[str, dict], seeds: Sequence[int],
                  fractions: Dict[float, int], num_labels: dict) -> str:
    """The two tables of the demo, as text."""

    def table(width: int, columns: list, stats_of) -> List[str]:
        """A header of ``columns`` and a row per encoder: ``stats_of``."""
        head = f'{"encoder":<14}' + ''.join(f'{c:>{width}}' for c in columns)
        return [head] + [
            f'{name:<14}' +
            ''.join(f'{s["mean"]:5.1f} ± {s["std"]:3.1f}'.rjust(width)
                    for s in stats_of(stats))
            for name, stats in summary.items()
        ]

    keys = [f'{f:.0%}' for f in fractions]
    pairs = [(k, t) for k in keys for t in TEST_SETS]
    draws = ', '.join(f'{k}: {fractions[f]} draws, {num_labels[k]} labels'
                      for k, f in zip(keys, fractions))
    return '\n'.join([
        f'weighted kNN top-1 (%) on the 539 held-out digits (k={KNN["k"]}, '
        f'memory: the 1258 training digits), mean ± std over seeds '
        f'{", ".join(str(s) for s in seeds)}',
        *table(14, TEST_SETS, lambda s: [s['knn'][t] for t in TEST_SETS]), '',
        'linear classifier on frozen features trained with a share of the '
        'training labels,', f'top-1 (%) on the held-out digits, mean ± std '
        f'over seeds x label draws ({draws})',
        *table(16, [f'{k} {t}' for k, t in pairs],
               lambda s: [s['linear'][k][t] for k, t in pairs])
    ])


def figure(summary: Dict[str, dict], runs: Dict[int, List[dict]],
           fractions: Dict[float, int], path: str) -> str:
    """Bars of both tables and the loss / kNN curves of every seed."""
    gets = [('weighted kNN (k=20), held-out digits', lambda s: s['knn'])]
    gets += [(f'linear classifier, {f:.0%} of the labels',
              lambda s, k=f'{f:.0%}': s['linear'][k]) for f in fractions]
    tables = [(title, 'top-1 (%)', {
        name: {
            t: (get(s)[t]['mean'], get(s)[t]['std'])
            for t in TEST_SETS
        }
        for name, s in summary.items()
    }) for title, get in gets]
    curves = [(title, 'iteration', {
        f'seed {seed}': line
        for seed, records in runs.items()
        for line in series(records, key).values()
    }) for key, title in (('loss', 'InfoNCE loss'),
                          ('knn/', 'MoCo v2 weighted kNN top-1 (%), clean '
                           'held-out digits'))]
    return plot_results_figure(
        tables, curves, path,
        'MoCo v2 on scikit-learn digits: features learnt without labels')


def write_report(config: str, models: dict, work_dir: str) -> dict:
    """embed.py of the held-out digits (a folder per class, one training
    view) with each of ``models`` (saved as checkpoints), embedding_report.py
    of MoCo against random init; its figures but the confused classes."""
    folder = osp.join(work_dir, 'digits')
    tools = osp.join(ROOT, 'tools', 'analysis_tools')
    embed = run_path(osp.join(tools, 'embed.py'))['main']
    write_digits_folder(folder)
    files = []
    for name, model in models.items():
        ckpt = osp.join(work_dir, f'{name}.pth')
        torch.save(dict(state_dict=model.state_dict()), ckpt)
        files.append(osp.join(work_dir, f'embed_{name}.npz'))
        embed([
            config, ckpt, '--data-root',
            osp.join(folder, 'val'), '--out', files[-1], '--size', '32',
            '--workers', '0'
        ])
    summary = run_path(osp.join(tools, 'embedding_report.py'))['main']([
        files[1], '--compare', files[0], '--out',
        osp.join(work_dir, 'report')
    ])
    for figures in summary.values():
        figures.pop('confused', None)
    return summary


def load_config(epochs: int = None, config: str = CONFIG) -> Config:
    cfg = Config.fromfile(config)
    if epochs:
        cfg.train_cfg.max_epochs = epochs
        cfg.param_scheduler[0].T_max = cfg.param_scheduler[0].end = epochs
    return cfg


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--work-dir', default=osp.join('work_dirs', 'demo'))
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--epochs', type=int)
    parser.add_argument(
        '--device-augment',
        action='store_true',
        help='augment the views batched on the model\'s device '
        f'({osp.relpath(DEVICE_AUGMENT_CONFIG, ROOT)})')
    args = parser.parse_args(argv)
    warnings.filterwarnings('ignore')
    config = DEVICE_AUGMENT_CONFIG if args.device_augment else CONFIG
    cfg = load_config(args.epochs, config)
    started, cpu_started = time.time(), time.process_time()
    print(
        f'mocoplug demo: MoCo v2 on scikit-learn digits, '
        f'{cfg.train_cfg.max_epochs} epochs x {len(args.seeds)} seeds, '
        f'{osp.basename(config)}, work dir {args.work_dir}',
        flush=True)
    per_encoder, runs, seconds = {RAW: [], RANDOM: [], MOCO: []}, {}, {}
    for seed in args.seeds:
        print(f'pretraining MoCo v2, seed {seed} (no labels)...', flush=True)
        t = time.time()
        model, runs[seed] = pretrain(cfg, seed,
                                     osp.join(args.work_dir, f'seed{seed}'))
        seconds[seed] = round(time.time() - t, 1)
        with DefaultScope.overwrite_default_scope('mocoplug'):
            set_random_seed(seed)
            random_init = MODELS.build(
                dict(cfg.model, data_preprocessor=cfg.data_preprocessor))
            random_init.init_weights()
            estimate_bn_statistics(random_init, digits_loader('train', False))
            encoders = {RANDOM: encode(random_init), MOCO: encode(model)}
            if not per_encoder[RAW]:  # raw pixels: the same every seed
                encoders[RAW] = encode(random_init,
                                       lambda x: x[:, :1].flatten(1))
        if seed == args.seeds[0]:
            report_models = dict(random_init=random_init, moco=model)
        for name, feats in encoders.items():
            per_encoder[name].append(
                dict(knn=knn_figures(feats), linear=label_efficiency(feats)))
    num_train = len(digits_loader('train').dataset)
    num_labels = {f'{f:.0%}': int(f * num_train) for f in LABEL_FRACTIONS}
    summary = summarise(per_encoder)
    tables = format_tables(summary, args.seeds, LABEL_FRACTIONS, num_labels)
    print('\n' + tables)
    figure_path = figure(summary, runs, LABEL_FRACTIONS,
                         osp.join(args.work_dir, 'results.png'))
    print(f'\nthe embedding report of the held-out digits, seed '
          f'{args.seeds[0]}...')
    report = write_report(config, report_models, args.work_dir)
    elapsed = time.time() - started
    results = dict(
        summary=summary,
        per_seed=per_encoder,
        seeds=args.seeds,
        knn=dict(
            KNN, memory='train (1258 digits)', queries='test (539 digits)'),
        label_fractions={
            f'{f:.0%}': dict(draws=d, labels=num_labels[f'{f:.0%}'])
            for f, d in LABEL_FRACTIONS.items()
        },
        linear_classifier='sklearn LogisticRegression(C=1) on features '
        'standardised over all training images',
        perturbation=PERTURBATION,
        config=osp.relpath(config, ROOT),
        epochs=cfg.train_cfg.max_epochs,
        pretrain_seconds=seconds,
        seconds=round(elapsed),
        cpu_seconds=round(time.process_time() - cpu_started),
        figure=figure_path,
        report=dict(
            page=osp.join(args.work_dir, 'report', 'index.html'),
            seed=args.seeds[0],
            figures=report),
        torch_threads=torch.get_num_threads())
    with open(osp.join(args.work_dir, 'results.json'), 'w') as f:
        json.dump(results, f, indent=2)
    print(f'\nfigure: {figure_path}')
    print(f'results: {osp.join(args.work_dir, "results.json")}  '
          f'({elapsed / 60:.1f} min)')
    return results


if __name__ == '__main__':
    main()
