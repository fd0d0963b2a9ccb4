# Copyright (c) mocoplug contributors. All rights reserved.
import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.dist import get_world_size
from mmengine.hooks import Hook, LoggerHook
from mmengine.runner import Runner
from mmpretrain.utils import get_ori_model
from torch.nn.modules.batchnorm import _BatchNorm

from mocoplug.datasets import dataset_transforms
from mocoplug.evaluation import (alignment, embedding_std,
                                 relative_parameter_distance, uniformity)
from mocoplug.models.utils import at_least_float32
from mocoplug.registry import HOOKS
from .moco_config_check_hook import iter_transforms
from .runner_info import current_lrs, mean_over_ranks, schedule_facts

#: The scalars the hook logs, as ``health/<name>`` (message hub: train/...).
HEALTH_SCALARS = ('std', 'std_norm', 'alignment', 'uniformity', 'pos_sim',
                  'neg_sim', 'key_query_dist', 'queue_age')


class NotLearningError(RuntimeError):
    """A run has not left chance level (``on_not_learning='stop'``)."""


@HOOKS.register_module()
class RepresentationHealthHook(Hook):
    r"""Log how healthy the contrastive embedding is, and warn on collapse
    or on a run that does not learn.

    On checked iterations the figures of the loss head's inputs go to the
    message hub as ``train/health/*`` (``HEALTH_SCALARS``, defined in
    docs/user_guides/pretraining.md): ``std`` / ``std_norm`` (`Chen & He
    2021 <https://arxiv.org/abs/2011.10566>`_), ``alignment`` /
    ``uniformity`` (`Wang & Isola, ICML 2020
    <https://arxiv.org/abs/2005.10242>`_), ``pos_sim`` / ``neg_sim``,
    ``key_query_dist`` and ``queue_age``. Collapse (``std_norm`` below
    ``collapse_ratio`` for ``patience`` checks) and not learning (checked
    once, docs/design_notes.md, "Not learning") are warned about with the
    likely causes. Models without a momentum encoder are left alone.

    Args:
        interval (int, optional): Check every ``interval`` iterations, a
            multiple of the LoggerHook's; None: the LoggerHook's, or 50.
        collapse_ratio (float): Collapse threshold on ``std * sqrt(d)``.
        patience (int): Consecutive low checks before warning.
        uniformity_t (float): t of the uniformity.
        not_learning_at (float): Fraction of the run at which to check
            that it learns; 0 disables the check.
        not_learning_margin (float): How far below ln(K + 1) (nats) the
            loss must be by then.
        on_not_learning (str): ``'warn'`` or ``'stop'`` (raises
            :class:`NotLearningError`).
    """

    priority = 'NORMAL'  # before LoggerHook (BELOW_NORMAL) prints the hub

    def __init__(self,
                 interval: Optional[int] = None,
                 collapse_ratio: float = 0.2,
                 patience: int = 3,
                 uniformity_t: float = 2.0,
                 not_learning_at: float = 0.2,
                 not_learning_margin: float = 0.25,
                 on_not_learning: str = 'warn') -> None:
        for bad, text in (
            (interval is not None
             and (not isinstance(interval, int) or interval < 1),
             f'interval must be a positive int or None, got {interval!r}'),
            (patience < 1, f'patience must be >= 1, got {patience}'),
            (not 0 < collapse_ratio < 1,
             f'collapse_ratio must be in (0, 1), got {collapse_ratio}'),
            (on_not_learning not in ('warn', 'stop'), "on_not_learning must "
             f"be 'warn' or 'stop', got {on_not_learning!r}"),
            (not 0 <= not_learning_at < 1,
             f'not_learning_at must be in [0, 1), got {not_learning_at}')):
            if bad:
                raise ValueError(f'RepresentationHealthHook: {text}')
        self.not_learning_at = not_learning_at
        self.not_learning_margin = not_learning_margin
        self.on_not_learning = on_not_learning
        self.not_learning: Optional[dict] = None  # the check's figures
        self._gaps: List[Tuple[int, float]] = []  # (iter, pos - neg sim)
        self.interval, self.collapse_ratio = interval, collapse_ratio
        self.patience, self.uniformity_t = patience, uniformity_t
        self.enabled = self.collapse_warned = False
        self._checking = self._published = False
        self.num_low_checks = self.dim = 0  # dim: of the embeddings
        self.last_metrics: Dict[str, float] = {}
        self._model = self._logger_hook = self._observed = self._handle = None
        self._online, self._target = [], []  # floating-point parameters
        self._calls = self._terms = 1  # head calls per step (loss terms)

    def before_train(self, runner: Runner) -> None:
        """Bind to the model and align the checks with the LoggerHook."""
        model = get_ori_model(runner.model)
        if not (isinstance(getattr(model, 'head', None), nn.Module)
                and callable(getattr(model, 'momentum_pairs', None))):
            runner.logger.info(
                f'RepresentationHealthHook: {type(model).__name__} has no '
                'momentum encoder to monitor; the hook does nothing.')
            return
        self._logger_hook = next(
            (h for h in runner.hooks if isinstance(h, LoggerHook)), None)
        log_interval = getattr(self._logger_hook, 'interval', None)
        if self.interval is None:
            self.interval = log_interval or 50
        elif log_interval and self.interval % log_interval:
            raise ValueError(
                f'RepresentationHealthHook: interval={self.interval} is not '
                f'a multiple of the LoggerHook interval ({log_interval}); '
                'set a multiple, or None.')
        pairs = list(model.momentum_pairs())
        self._online, self._target = ([
            p for pair in pairs for p in pair[i].parameters()
            if p.is_floating_point()
        ] for i in (0, 1))
        self._model, self.enabled = model, True
        self._handle = model.head.register_forward_hook(self.observe)

    def after_train(self, runner: Runner) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    @torch.no_grad()
    def observe(self, head: nn.Module, args: tuple, output: dict) -> None:
        """Forward hook of ``head(query, key, negatives, neg_mask=None)``:
        keep the embeddings and the query-negative cosines' sum and count;
        count the calls (the loss terms of a step)."""
        self._calls += 1
        if not self._checking:
            return
        query, key, negatives = (
            at_least_float32(t.detach()) for t in args[:3])
        mask = args[3] if len(args) > 3 else None
        with torch.autocast(query.device.type, enabled=False):
            sims = query @ negatives.to(query.dtype).t()
        if mask is None:
            neg_sum, neg_count = sims.sum(), max(sims.numel(), 1)
        else:
            keep = ~mask
            neg_sum, neg_count = (sims * keep).sum(), keep.sum().clamp(min=1)
        observed = self._observed = self._observed or dict(
            queries=[], keys=[], neg_sum=[], neg_count=[])
        for name, value in zip(observed, (query, key, neg_sum, neg_count)):
            observed[name].append(value)

    def is_check_iter(self, runner: Runner, batch_idx: int) -> bool:
        """Whether this iteration (one the LoggerHook prints) is checked."""
        ends_epoch = self.end_of_epoch(runner.train_dataloader, batch_idx)
        logger = self._logger_hook
        if logger is not None:
            logged = self.every_n_inner_iters(batch_idx, logger.interval) or (
                ends_epoch and
                (not logger.ignore_last
                 or len(runner.train_dataloader) <= logger.interval))
            if not logged:
                return False
        return self.every_n_inner_iters(batch_idx, self.interval) or (
            ends_epoch and len(runner.train_dataloader) < self.interval)

    def before_train_iter(self, runner: Runner, batch_idx, **kwargs) -> None:
        if not self.enabled:
            return
        if runner.iter == self.check_iter(runner):
            self.check_learning(runner)
        self._checking = self.is_check_iter(runner, batch_idx)
        self._observed, self._calls = None, 0

    def after_train_iter(self, runner: Runner, batch_idx, **kwargs) -> None:
        self._terms = self._calls or self._terms
        if not self._checking:
            if self._published:  # not printed again between checks
                for name in HEALTH_SCALARS:
                    runner.message_hub.log_scalars.pop(f'train/health/{name}',
                                                       None)
                self._published = False
            return
        observed, self._observed, self._checking = self._observed, None, False
        if observed is None:
            return
        metrics = self.last_metrics = self.measure(observed, runner.iter + 1)
        for name, value in metrics.items():
            runner.message_hub.update_scalar(f'train/health/{name}', value)
        self._published = True
        self._gaps.append(
            (runner.iter + 1, metrics['pos_sim'] - metrics['neg_sim']))
        self.check_collapse(runner, metrics)

    @torch.no_grad()
    def measure(self, observed: dict, steps: int) -> Dict[str, float]:
        """The figures (``HEALTH_SCALARS``) of what :meth:`observe` kept of
        one step; ``steps`` counts the iterations done, this one included."""
        queries, keys = ([
            F.normalize(at_least_float32(t), dim=1) for t in observed[name]
        ] for name in ('queries', 'keys'))
        q_all, k_all = torch.cat(queries), torch.cat(keys)
        dim = self.dim = q_all.shape[1]
        values = dict(
            std=embedding_std(q_all),
            alignment=alignment(q_all, k_all),
            uniformity=torch.stack(
                [uniformity(q, self.uniformity_t) for q in queries]).mean(),
            pos_sim=(q_all * k_all).sum(dim=1).mean(),
            neg_sim=sum(observed['neg_sum']) / sum(observed['neg_count']),
            key_query_dist=relative_parameter_distance(self._online,
                                                       self._target))
        figures = dict(
            zip(values, mean_over_ranks(torch.stack(list(values.values())))))
        figures['std_norm'] = figures['std'] * math.sqrt(dim)
        queue = getattr(self._model, 'queue', None)
        if queue is not None:
            per_step = self.keys_per_step(queue, k_all.shape[0])
            figures['queue_age'] = float(
                min(steps, math.ceil(queue.size / per_step)) - 1)
        return {n: figures[n] for n in HEALTH_SCALARS if n in figures}

    def _fill_and_window(self, runner: Runner) -> Tuple[int, int]:
        """Steps until the queue holds only keys of this data (0 without a
        queue or after QueueRefillHook), and the window."""
        queue = getattr(self._model, 'queue', None)
        refilled = getattr(self._model, 'encoders_from', None) and any(
            type(h).__name__ == 'QueueRefillHook' for h in runner.hooks)
        fill = 0
        if queue is not None and not refilled:
            batch = getattr(runner.train_dataloader, 'batch_size', 0) or 1
            fill = math.ceil(queue.size / self.keys_per_step(queue, batch))
        return fill, max(5, runner.max_iters // 20)

    def check_iter(self, runner: Runner) -> int:
        """The (0-based) iteration of the learning check; -1 for none."""
        if not self.not_learning_at or self.not_learning is not None:
            return -1
        fill, window = self._fill_and_window(runner)
        at = max(
            math.ceil(self.not_learning_at * runner.max_iters),
            fill + 2 * window)
        return at if at < runner.max_iters else -1

    def check_learning(self, runner: Runner) -> None:
        """The not-learning check (see the class docstring)."""
        fill, window = self._fill_and_window(runner)
        history = runner.message_hub.log_scalars.get('train/loss')
        losses = history.data[0] if history is not None else []
        if len(losses) < window:  # resumed just before: too little history
            return
        weight = getattr(self._model.head, 'loss_module', None)
        weight = getattr(weight, 'loss_weight', 1.0) * self._terms
        loss = mean_over_ranks([float(losses[-window:].mean()) / weight])[0]
        queue = getattr(self._model, 'queue', None)
        classes = queue.size + 1 if queue is not None else (getattr(
            runner.train_dataloader, 'batch_size', 0) or 0) * get_world_size()
        chance = math.log(classes) if classes > 1 else None
        gaps = [g for it, g in self._gaps if it > fill]  # equal on ranks
        gap = sum(gaps) / len(gaps) if gaps else None
        self.not_learning = dict(
            iter=runner.iter, loss=loss, chance=chance, gap=gap)
        reasons = []
        if chance is not None and loss > chance - self.not_learning_margin:
            reasons.append(
                f'the InfoNCE loss (one term, unweighted), {loss:.3f} on '
                f'average over the last {window} iterations, has not left '
                f'chance level: ln({"K + 1" if queue else "batch"}) = '
                f'ln({classes}) = {chance:.3f}, by '
                '{:.3f} < {} nats'.format(chance - loss,
                                          self.not_learning_margin))
        if gap is not None and gap <= 0:
            reasons.append(
                f'positives are no closer than negatives: pos_sim - neg_sim '
                f'= {gap:.3f} on average over {len(gaps)} checks')
        self.not_learning['learning'] = not reasons
        if not reasons:
            return
        message = '\n'.join([
            f'RepresentationHealthHook: NOT LEARNING at iteration '
            f'{runner.iter} of {runner.max_iters} '
            f'({self.not_learning_at:.0%} of the run): ' + '; '.join(reasons) +
            '. Likely causes:'
        ] + ['  - ' + c for c in self.not_learning_causes(runner)] +
                            ['Checked once per run.'])
        if self.on_not_learning == 'stop':
            raise NotLearningError(message)
        runner.logger.warning(message)

    def not_learning_causes(self, runner: Runner) -> List[str]:
        """The usual causes of not learning, with what this run says."""
        facts, lr = schedule_facts(runner), current_lrs(runner)
        crop = _crop_area(runner.train_dataloader)
        return [
            f'Too few iterations for the data: {runner.max_iters} '
            f'iterations, {facts} (configs/mocov2/README.md).',
            'A network too large for the images to train from scratch: '
            'continue from released weights (model.encoders_from; '
            'docs/user_guides/pretraining.md)' +
            (f'; this run starts from {self._model.encoders_from}.' if getattr(
                self._model, 'encoders_from', None) else '.'),
            'Learning rate too low or too high' +
            (f'; current {lr}.' if lr else '.'),
            'Views too hard or too easy' +
            (f'; this run crops {crop[0]:.0%} to {crop[1]:.0%} of the image '
             'area (crop_ratio_range).' if crop else '.'),
        ]

    @staticmethod
    def keys_per_step(queue: nn.Module, local_keys: int) -> int:
        """Keys a training step enqueues, over all ranks."""
        gather = getattr(queue, 'gather', True)
        return local_keys * (get_world_size() if gather else 1)

    def check_collapse(self, runner: Runner, metrics: dict) -> None:
        """Count consecutive collapsed checks; warn once past patience."""
        low = metrics['std_norm'] < self.collapse_ratio
        self.num_low_checks = self.num_low_checks + 1 if low else 0
        if self.num_low_checks >= self.patience and not self.collapse_warned:
            self.collapse_warned = True
            runner.logger.warning(self.collapse_message(runner, metrics))

    def collapse_message(self, runner: Runner, metrics: dict) -> str:
        """The collapse warning, with the likely causes."""
        return '\n'.join([
            'RepresentationHealthHook: REPRESENTATION COLLAPSE at iteration '
            f'{runner.iter + 1}: std_norm {metrics["std_norm"]:.3f} (healthy: '
            f'about 1) below {self.collapse_ratio} for {self.num_low_checks} '
            f'checks in a row; uniformity {metrics["uniformity"]:.3f} (0 = '
            f'collapsed), pos_sim {metrics["pos_sim"]:.3f}, neg_sim '
            f'{metrics["neg_sim"]:.3f}. Likely causes (shown once per run):'
        ] + ['  - ' + cause for cause in self.likely_causes(runner)])

    def likely_causes(self, runner: Runner) -> List[str]:
        """The usual causes of collapse, with what this model says."""
        model = self._model
        shuffle_bn = getattr(model, 'shuffle_bn', None)
        has_bn = any(
            isinstance(m, _BatchNorm) and not isinstance(m, nn.SyncBatchNorm)
            for m in model.modules())
        if shuffle_bn == 'none' and has_bn:
            bn = ("BatchNorm leak: BatchNorm with shuffle_bn='none'; set "
                  "model.shuffle_bn='ddp' (several GPUs) or 'split', or use "
                  'SyncBN.')
        elif shuffle_bn == 'ddp' and get_world_size() == 1:
            bn = ("BatchNorm leak: shuffle_bn='ddp' has no effect in a "
                  "single process; set model.shuffle_bn='split'.")
        elif shuffle_bn is None:
            bn = 'BatchNorm leak: with in-batch negatives use SyncBN.'
        else:
            bn = f"BatchNorm leak: unlikely here (shuffle_bn='{shuffle_bn}')."
        neck_bn = any(
            isinstance(m, _BatchNorm)
            for m in getattr(model, 'neck', nn.Identity()).modules())
        neck = ('An MLP neck without BatchNorm on a small dataset: ' +
                ('this neck has BatchNorm.' if neck_bn else
                 'this neck has none; try with_bn=True, with_last_bn=True, '
                 'with_last_bn_affine=False.'))
        temperature = getattr(
            getattr(model, 'head', None), 'temperature', None)
        lr = current_lrs(runner)
        return [
            bn,
            'Learning rate too high (MoCo v2\'s 0.03 is for a total batch '
            'of 256: auto_scale_lr) or too low' +
            (f'; current {lr}.' if lr else '.'),
            neck,
            'A very small temperature (below ~0.05)' +
            (f'; this run: {temperature}.'
             if temperature is not None else '.'),
        ]


def _crop_area(loader) -> Optional[tuple]:
    """The area range of the training pipeline's first RandomResizedCrop
    (mmpretrain's ``crop_ratio_range``, torchvision's ``scale``) or None."""
    for t in iter_transforms(dataset_transforms(loader.dataset) or []):
        area = getattr(t, 'crop_ratio_range', getattr(t, 'scale', None))
        if 'ResizedCrop' in type(t).__name__ and isinstance(
                area, (tuple, list)) and len(area) == 2:
            return tuple(area)
