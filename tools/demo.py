# Copyright (c) mocoplug contributors. All rights reserved.
"""The embedded demo: MoCo v2 pretraining on real images that ship with
scikit-learn, then weighted-kNN evaluation on held-out images.

1. Pretrain MoCo v2 twice, without labels, on the 1258 training digits
   (configs/mocov2_r18-cifar-w16_1xb64-splitbn-coslr-30e_digits.py): with
   the queue as is, and with `exclude_same_instance=True` (the dataset is
   smaller than the 4096-key queue, so the queue holds older keys of the
   query's own image: false negatives).
2. Encode the training digits (the kNN memory) and the 539 held-out digits,
   clean and under one fixed random shift/rotation/zoom/contrast change,
   and classify the held-out digits by weighted kNN (k=20, t=0.07) for:
   raw pixels, the same encoder at random init, and both MoCo encoders.
3. Print the table, write results.json and the loss / contrastive accuracy
   / kNN curves as PNG under the work dir.

    python tools/demo.py [--work-dir work_dirs/demo] [--epochs 30]
"""
import argparse
import copy
import json
import os
import os.path as osp
import time
import warnings

import torch
from mmengine.config import Config
from mmengine.dataset import default_collate
from mmengine.hooks import Hook
from mmengine.registry import DefaultScope
from mmengine.runner import Runner, set_random_seed
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.data import DataLoader

import mocoplug  # noqa: F401
from mocoplug.engine.hooks import KNNMonitorHook
from mocoplug.evaluation import extract_features, weighted_knn_accuracy
from mocoplug.registry import DATASETS, MODELS
from mocoplug.visualization import load_scalars, plot_scalar_curves

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG = osp.join(ROOT, 'configs',
                  'mocov2_r18-cifar-w16_1xb64-splitbn-coslr-30e_digits.py')
KNN = dict(topk=(20, ), temperature=0.07)
PERTURBATION = dict(
    type='FixedRandomAffine',
    degrees=20,
    translate=0.1,
    scale=(0.8, 1.2),
    contrast=(0.5, 1.5),
    seed=0)


class EpochPrinter(Hook):
    """One line per epoch on the console while the run's log stays in its
    work dir."""
    priority = 'LOWEST'

    def __init__(self, label: str):
        self.label = label

    def before_train(self, runner):
        self.start = time.time()

    def after_train_epoch(self, runner):
        n = len(runner.train_dataloader)
        hub = runner.message_hub
        loss = hub.get_scalar('train/loss').mean(n)
        acc = hub.get_scalar('train/contrast_acc').mean(n)
        knn = next((h.last_metrics
                    for h in runner.hooks if isinstance(h, KNNMonitorHook)),
                   {})
        knn_text = '  '.join(f'kNN {k} {v:.1f}%' for k, v in knn.items())
        print(
            f'  [{self.label}] epoch {runner.epoch + 1:>2}/'
            f'{runner.max_epochs}  loss {loss:.3f}  contrastive acc '
            f'{acc:5.1f}%  {knn_text}  ({time.time() - self.start:.0f}s)',
            flush=True)
        for hook in runner.hooks:  # print each kNN figure once
            if isinstance(hook, KNNMonitorHook):
                hook.last_metrics = {}


def pretrain(cfg: Config, label: str, work_dir: str, exclude: bool):
    cfg = copy.deepcopy(cfg)
    cfg.work_dir = work_dir
    cfg.model.queue.exclude_same_instance = exclude
    cfg.log_level = 'WARNING'  # the full log is in the work dir
    runner = Runner.from_cfg(cfg)
    runner.register_hook(EpochPrinter(label))
    runner.train()
    return runner.model, load_scalars(work_dir)


def digits_loader(split: str, perturbed: bool) -> DataLoader:
    pipeline = ([PERTURBATION]
                if perturbed else []) + [dict(type='PackInputs')]
    dataset = DATASETS.build(
        dict(type='DigitsDataset', split=split, pipeline=pipeline))
    return DataLoader(dataset, batch_size=256, collate_fn=default_collate)


@torch.no_grad()
def estimate_bn_statistics(model, loader: DataLoader) -> None:
    """Set BN running statistics to their exact average over the loader.

    A randomly initialised encoder has running statistics 0/1 that match
    nothing; evaluating it in eval mode would understate what random
    features can do. No weight changes."""
    norms = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the batches
    model.train()
    for data in loader:
        model.backbone(model.data_preprocessor(data, False)['inputs'])
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
    model.eval()


def knn_figures(model, feature_fn=None) -> dict:
    """kNN top-1 (%) of held-out digits, clean and perturbed."""
    bank, bank_labels = extract_features(model, digits_loader('train', False),
                                         feature_fn)
    out = {}
    for name, perturbed in (('clean', False), ('perturbed', True)):
        query, labels = extract_features(model,
                                         digits_loader('test',
                                                       perturbed), feature_fn)
        acc = weighted_knn_accuracy(query, labels, bank, bank_labels, 10,
                                    **KNN)
        out[name] = acc[f'top1_k{KNN["topk"][0]}']
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--work-dir', default=osp.join('work_dirs', 'demo'))
    parser.add_argument('--epochs', type=int, help='override the epochs')
    args = parser.parse_args(argv)
    warnings.filterwarnings('ignore')
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    cfg = Config.fromfile(CONFIG)
    if args.epochs:
        cfg.train_cfg.max_epochs = args.epochs
        cfg.param_scheduler[0].T_max = cfg.param_scheduler[0].end = \
            args.epochs
    started = time.time()
    print(
        f'mocoplug demo: MoCo v2 on scikit-learn digits, '
        f'{cfg.train_cfg.max_epochs} epochs x 2 runs, work dir '
        f'{args.work_dir}',
        flush=True)
    runs = {}
    models = {}
    for label, exclude in (('MoCo v2', False),
                           ('MoCo v2 + exclude_same_instance', True)):
        print(f'pretraining {label} (no labels)...', flush=True)
        sub = 'exclude_same_instance' if exclude else 'plain'
        models[label], runs[label] = pretrain(cfg, label,
                                              osp.join(args.work_dir, sub),
                                              exclude)

    print(
        'weighted kNN on the 539 held-out digits (memory: 1258 training '
        'digits, k=20, t=0.07)...',
        flush=True)
    with DefaultScope.overwrite_default_scope('mocoplug'):
        set_random_seed(cfg.randomness.seed)
        random_init = MODELS.build(
            dict(cfg.model, data_preprocessor=cfg.data_preprocessor))
        random_init.init_weights()
        estimate_bn_statistics(random_init, digits_loader('train', False))
        results = {
            'raw pixels': knn_figures(random_init, lambda x: x.flatten(1)),
            'random init (same encoder)': knn_figures(random_init),
        }
        for label, model in models.items():
            results[label] = knn_figures(model)

    header = f'{"encoder":<34}{"clean":>8}{"perturbed":>11}'
    print('\n' + header + '\n' + '-' * len(header))
    for label, acc in results.items():
        print(f'{label:<34}{acc["clean"]:>7.1f}%{acc["perturbed"]:>10.1f}%')
    curves = plot_scalar_curves(runs, osp.join(args.work_dir, 'curves'))
    elapsed = time.time() - started
    summary = dict(
        results=results,
        knn=dict(
            k=20,
            temperature=0.07,
            memory='train (1258)',
            queries='test (539)'),
        perturbation=PERTURBATION,
        epochs=cfg.train_cfg.max_epochs,
        seconds=round(elapsed),
        curves=curves,
        torch_threads=torch.get_num_threads())
    os.makedirs(args.work_dir, exist_ok=True)
    with open(osp.join(args.work_dir, 'results.json'), 'w') as f:
        json.dump(summary, f, indent=2)
    print(f'\ncurves: {", ".join(curves)}')
    print(f'results: {osp.join(args.work_dir, "results.json")}  '
          f'({elapsed / 60:.1f} min)')
    return summary


if __name__ == '__main__':
    main()
