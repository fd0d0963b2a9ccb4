# Copyright (c) mocoplug contributors. All rights reserved.
import glob
import math
import os.path as osp
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.logging import MessageHub, MMLogger
from mmengine.model import BaseModule
from mmengine.runner import Runner

from mocoplug.engine.hooks import RepresentationHealthHook
from mocoplug.evaluation import alignment, embedding_std, uniformity
from mocoplug.models import InfoNCEHead, MoCo
from mocoplug.registry import MODELS
from mocoplug.visualization import load_scalars
from ...models.algorithms.test_mocov3 import DIM as DIM_V3
from ...models.algorithms.test_mocov3 import branches, samples, tiny_mocov3

RESNET = dict(
    type='ResNet',
    depth=18,
    stem_channels=16,
    base_channels=16,
    out_indices=(3, ))
HEALTH_HOOK = 'RepresentationHealthHook'
# Every health figure is a function of unit vectors, computed in float32
# (u = 2^-24) through fewer than 30 roundings of O(1) terms; the hook and
# the hand computations below normalise and reduce in other orders. Each is
# within 30 u x 8 (uniformity's exponent t d^2 <= 8; std_norm's factor
# sqrt(d) <= 5.7) = 1.4e-5 of the exact figure, so they differ by < 3e-5
# in absolute terms, on any CPU; the figures are O(0.1) to O(1), where a
# wrong set of negatives or keys moves them by 1e-2 or more.
HEALTH_ATOL = 5e-5


@MODELS.register_module(force=True)
class ConstantNeck(BaseModule):
    """A deliberately collapsed projection: every image -> one vector
    (a learnable one, kept in the graph of the backbone)."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.value = nn.Parameter(torch.randn(out_channels))

    def forward(self, x):
        feat = x[-1].mean(dim=(2, 3))
        return (self.value.expand(feat.shape[0], -1) +
                0 * feat.sum(dim=1, keepdim=True), )


def fake_runner(model, iteration=0):
    return SimpleNamespace(
        model=model,
        hooks=[],
        iter=iteration,
        max_iters=1000,
        train_dataloader=range(100),  # 100 iterations an epoch
        logger=MMLogger.get_current_instance(),
        message_hub=MessageHub.get_current_instance())


def loader_of_4():
    """A stand-in train loader: batch 4, 100 batches of 400 images."""
    return type('Loader', (list, ), dict(batch_size=4, dataset=range(400)))(
        range(100))


def tiny_moco(queue_size=6, dim=4):
    model = MoCo(
        backbone=RESNET,
        neck=dict(
            type='MoCoProjectionNeck',
            in_channels=128,
            hid_channels=32,
            out_channels=dim),
        head=dict(type='InfoNCEHead', temperature=0.2),
        queue=dict(type='NegativeKeyQueue', size=queue_size, dim=dim),
        shuffle_bn='none')
    model.init_weights()
    return model


def test_queue_figures_equal_a_hand_computation():
    model = tiny_moco()
    runner = fake_runner(model, iteration=1)
    hook = RepresentationHealthHook()
    hook.before_train(runner)
    assert hook.enabled and hook.interval == 50  # no LoggerHook
    gen = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(2, 4, generator=gen), dim=1)
    k = F.normalize(torch.randn(2, 4, generator=gen), dim=1)
    bank = F.normalize(torch.randn(6, 4, generator=gen), dim=1)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[1, 3] = True  # an older key of query 1's image
    with torch.no_grad():  # key encoder 1% off the query encoder's weights
        for p in model.momentum_encoder.parameters():
            p.mul_(1.01)

    model.head(q, k, bank, mask)  # not a checked iteration: nothing kept
    hook.after_train_iter(runner, batch_idx=1)
    assert hook.last_metrics == {}
    hook.before_train_iter(runner, batch_idx=49)  # the 50th: checked
    model.head(q, k, bank, mask)  # what the loss calls
    hook.after_train_iter(runner, batch_idx=49)
    metrics = hook.last_metrics

    pairs = [(i, j) for i in range(2) for j in range(6) if not mask[i, j]]
    neg = sum(float(q[i] @ bank[j]) for i, j in pairs) / len(pairs)
    tol = dict(abs=HEALTH_ATOL, rel=0)
    assert metrics['neg_sim'] == pytest.approx(neg, **tol)
    assert metrics['pos_sim'] == pytest.approx(
        float((q * k).sum(1).mean()), **tol)
    assert metrics['std'] == pytest.approx(float(embedding_std(q)), **tol)
    assert metrics['std_norm'] == metrics['std'] * 2  # x sqrt(4): exact
    assert metrics['alignment'] == pytest.approx(float(alignment(q, k)), **tol)
    assert metrics['uniformity'] == pytest.approx(float(uniformity(q)), **tol)
    # parameters of backbone + neck, scaled by 1.01: distance 1%; rounding
    # 1.01 p to float32 moves the difference by u |p| = 100 u of 0.01 |p|
    assert metrics['key_query_dist'] == pytest.approx(0.01, rel=1e-4)
    # 2 keys a step, 6 slots: full after 3 steps, oldest key 2 steps old
    assert metrics['queue_age'] == 1
    observed = dict(
        queries=[q], keys=[k], neg_sum=[torch.zeros(())], neg_count=[1])
    assert hook.measure(observed, steps=10)['queue_age'] == 2


def test_a_float64_model_is_measured_in_float64():
    model = tiny_moco().double()
    hook = RepresentationHealthHook()
    hook.before_train(fake_runner(model))
    q = F.normalize(torch.randn(3, 4, dtype=torch.float64), dim=1)
    observed = dict(
        queries=[q], keys=[q], neg_sum=[torch.zeros(())], neg_count=[1])
    # Measured in float64: re-normalising unit vectors and the std (a few
    # dozen roundings of O(1) terms) stay within 50 u = 1.1e-14 of the
    # reference on any CPU; a float32 copy would be off by about u32 = 6e-8.
    assert hook.measure(
        observed, steps=1)['std'] == pytest.approx(
            float(embedding_std(q)), abs=2e-14, rel=0)


def test_mocov3_observes_both_terms_and_uses_in_batch_negatives():
    torch.manual_seed(0)
    model = tiny_mocov3()
    runner = fake_runner(model)
    hook = RepresentationHealthHook(interval=1)
    hook.before_train(runner)
    view_1, view_2 = torch.randn(2, 4, 3, 32, 32)
    hook.before_train_iter(runner, batch_idx=0)
    model.loss([view_1, view_2], samples(range(4)))
    observed = hook._observed
    q1, k1 = branches(model, view_1)
    q2, k2 = branches(model, view_2)
    for got, want in zip(observed['queries'] + observed['keys'],
                         (q1, q2, k2, k1)):
        # the same modules on the same views
        assert torch.allclose(got, F.normalize(want, dim=1), rtol=0, atol=1e-6)
        assert not got.requires_grad
    hook.after_train_iter(runner, batch_idx=0)
    metrics = hook.last_metrics
    assert 'queue_age' not in metrics
    negs = []
    for q, k in ((q1, k2), (q2, k1)):
        sims = F.normalize(q, dim=1) @ F.normalize(k, dim=1).t()
        negs += [sims[i, j] for i in range(4) for j in range(4) if i != j]
    tol = dict(abs=HEALTH_ATOL, rel=0)
    assert metrics['neg_sim'] == pytest.approx(
        float(sum(negs) / len(negs)), **tol)
    q_all = torch.cat([q1, q2])
    assert metrics['std'] == pytest.approx(float(embedding_std(q_all)), **tol)
    assert metrics['uniformity'] == pytest.approx(
        (float(uniformity(q1)) + float(uniformity(q2))) / 2, **tol)


def test_models_without_momentum_encoder_are_left_alone():
    hook = RepresentationHealthHook()
    hook.before_train(fake_runner(nn.Linear(2, 2)))
    assert not hook.enabled
    hook.before_train_iter(fake_runner(nn.Linear(2, 2)), 0)
    hook.after_train_iter(fake_runner(nn.Linear(2, 2)), 0)


def test_interval_must_be_a_multiple_of_the_logger_interval(
        tmp_path, tiny_moco_runner_cfg):
    cfg = tiny_moco_runner_cfg(
        tmp_path,
        max_iters=1,
        hooks=[
            dict(type='MomentumUpdateHook', momentum=0.99),
            dict(type=HEALTH_HOOK, interval=3)
        ])
    cfg.default_hooks.logger.interval = 2
    with pytest.raises(ValueError, match='multiple of the LoggerHook'):
        Runner.from_cfg(cfg).train()


def health_runner(tmp_path, make_cfg, max_iters, neck=None, **hook_args):
    hooks = [
        dict(type='MomentumUpdateHook', momentum=0.99),
        dict(type=HEALTH_HOOK, **hook_args)
    ]
    cfg = make_cfg(tmp_path, max_iters=max_iters, hooks=hooks)
    if neck is not None:
        cfg.model.neck = neck
    runner = Runner.from_cfg(cfg)
    hook = next(
        h for h in runner.hooks if isinstance(h, RepresentationHealthHook))
    return runner, hook


def collapse_warnings(tmp_path):
    log = glob.glob(osp.join(str(tmp_path), '*', '*.log'))
    assert len(log) == 1
    with open(log[0]) as f:
        return f.read().count('REPRESENTATION COLLAPSE')


def test_logs_the_current_batch_only_on_check_iterations(
        tmp_path, tiny_moco_runner_cfg, monkeypatch):
    """A real run (LoggerHook every iteration, checks every 2nd): the
    figures in the scalars log are those of the embeddings the training
    step produced on that iteration; the other iterations keep nothing
    and compute nothing."""
    calls = []
    loss_against = InfoNCEHead.loss_against

    def spy(head, query, key, negatives, neg_mask=None):
        calls.append(
            dict(
                query=query.detach().clone(),
                key=key.detach().clone(),
                bank=negatives.detach().clone()))
        return loss_against(head, query, key, negatives, neg_mask)

    monkeypatch.setattr(InfoNCEHead, 'loss_against', spy)
    measured = []
    measure = RepresentationHealthHook.measure

    def count(self, *args, **kwargs):
        measured.append(True)
        return measure(self, *args, **kwargs)

    monkeypatch.setattr(RepresentationHealthHook, 'measure', count)
    runner, hook = health_runner(
        tmp_path, tiny_moco_runner_cfg, max_iters=4, interval=2)
    runner.train()

    assert len(calls) == 4
    assert len(measured) == 2
    assert hook._observed is None
    records = load_scalars(str(tmp_path))
    health = {r['step']: r for r in records if 'health/std' in r}
    assert sorted(health) == [2, 4]
    assert all('health/std' not in r for r in records if r['step'] in (1, 3))
    for step in (2, 4):
        call, logged = calls[step - 1], health[step]
        q, k = call['query'], call['key']
        tol = dict(abs=HEALTH_ATOL, rel=0)
        assert logged['health/std'] == pytest.approx(
            float(embedding_std(q)), **tol)
        assert logged['health/std_norm'] == pytest.approx(
            float(embedding_std(q)) * math.sqrt(32), **tol)
        assert logged['health/alignment'] == pytest.approx(
            float(alignment(q, k)), **tol)
        assert logged['health/uniformity'] == pytest.approx(
            float(uniformity(q)), **tol)
        assert logged['health/pos_sim'] == pytest.approx(
            float((q * k).sum(1).mean()), **tol)
        # negatives: the queue the loss used (48 slots)
        assert logged['health/neg_sim'] == pytest.approx(
            float((q @ call['bank'].t()).mean()), **tol)
        assert logged['health/queue_age'] == step - 1
        assert 0 < logged['health/key_query_dist'] < 1
    assert collapse_warnings(tmp_path) == 0


def test_collapsing_model_is_warned_about_exactly_once(tmp_path,
                                                       tiny_moco_runner_cfg):
    runner, hook = health_runner(
        tmp_path,
        tiny_moco_runner_cfg,
        max_iters=4,
        neck=dict(type='ConstantNeck', in_channels=128, out_channels=32),
        patience=2)
    runner.train()
    # identical rows: the std is the round-off of their mean (~u), the
    # pairwise distances are exactly 0, so the uniformity is log(1) = 0
    assert hook.last_metrics['std'] == pytest.approx(0, abs=1e-6)
    assert hook.last_metrics['uniformity'] == pytest.approx(0, abs=1e-5)
    assert hook.collapse_warned and hook.num_low_checks == 4
    assert collapse_warnings(tmp_path) == 1
    message = hook.collapse_message(runner, hook.last_metrics)
    assert "shuffle_bn='split'" in message  # the model's BN set-up, named
    assert 'this neck has none' in message
    assert 'current lr 0.03' in message


def test_healthy_model_is_not_warned_about(tmp_path, tiny_moco_runner_cfg):
    neck = dict(
        type='MoCoProjectionNeck',
        in_channels=128,
        hid_channels=128,
        out_channels=32,
        with_bn=True,
        with_last_bn=True,
        with_last_bn_affine=False)
    runner, hook = health_runner(
        tmp_path, tiny_moco_runner_cfg, max_iters=3, neck=neck, patience=1)
    runner.train()
    records = [r for r in load_scalars(str(tmp_path)) if 'health/std' in r]
    assert [r['step'] for r in records] == [1, 2, 3]
    assert all(r['health/std_norm'] > 0.5 for r in records)
    assert not hook.collapse_warned and hook.num_low_checks == 0
    assert collapse_warnings(tmp_path) == 0


DIGITS = osp.join(
    osp.dirname(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))),
    'configs', 'mocov2',
    'mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py')


@pytest.fixture(scope='module')
def digits_runs(tmp_path_factory):
    """The digits demo's config for 2 epochs (38 iterations, queue 512:
    the check at iteration 18), as it is (lr 0.005) and with lr 0; each
    stops after its first epoch (19 iterations), past the check."""
    from mmengine.config import Config
    from mmengine.hooks import Hook

    class StopAfterFirstEpoch(Hook):

        def after_train_epoch(self, runner):
            runner.train_loop.stop_training = True

    runs = {}
    for lr in (0.005, 0.0):
        cfg = Config.fromfile(DIGITS)
        cfg.work_dir = str(tmp_path_factory.mktemp(f'lr{lr}'))
        cfg.log_level = 'WARNING'
        cfg.custom_hooks = cfg.custom_hooks[:1]  # no kNN monitor
        cfg.model.queue.size = 512
        cfg.optim_wrapper.optimizer.lr = lr
        cfg.train_cfg.max_epochs = 2
        cfg.param_scheduler[0].update(T_max=2, end=2)
        runner = Runner.from_cfg(cfg)
        runner.register_hook(StopAfterFirstEpoch())
        runner.train()
        assert runner.iter == 19
        log = glob.glob(osp.join(cfg.work_dir, '*', '*.log'))[0]
        with open(log) as f:
            runs[lr] = runner, f.read()
    return runs


def health_hook(runner):
    return next(
        h for h in runner.hooks if isinstance(h, RepresentationHealthHook))


def test_a_learning_run_is_not_warned_about(digits_runs):
    """lr 0.005: by iteration 18 (20% of the run, after the queue holds
    only real keys from iteration 8 on, and two windows of 5) the loss is
    0.4 below ln(513); no warning."""
    runner, log = digits_runs[0.005]
    figures = health_hook(runner).not_learning
    assert figures['iter'] == 18 and figures['learning']
    assert figures['loss'] < figures['chance'] - 0.25
    assert figures['chance'] == pytest.approx(math.log(513))
    assert 'NOT LEARNING' not in log


def test_a_run_that_cannot_learn_is_warned_about_early(digits_runs):
    """lr 0: the loss stays at ln(K + 1) or above; warned once, at
    iteration 18 of 38, with the causes checked against the run;
    on_not_learning='stop' raises instead."""
    from mocoplug.engine.hooks.representation_health_hook import \
        NotLearningError
    runner, log = digits_runs[0.0]
    hook = health_hook(runner)
    assert hook.not_learning['iter'] == 18
    assert not hook.not_learning['learning']
    assert log.count('NOT LEARNING at iteration 18 of 38') == 1
    for part in ('has not left chance level', 'ln(513)', 'current lr 0',
                 '38 iterations, total batch 64, 1.9 epochs of 1258 images',
                 'model.encoders_from'):
        assert part in log, part
    # the same check, asked to stop: raises with the same message
    hook.not_learning, hook.on_not_learning = None, 'stop'
    with pytest.raises(NotLearningError, match='NOT LEARNING'):
        hook.check_learning(runner)


@pytest.mark.parametrize('queue', [True, False], ids=['queue', 'in-batch'])
def test_the_learning_check_reads_one_unweighted_infonce_term(queue):
    """MoCo v3 logs loss = w (term_1 + term_2), w = 2 t = 2: a logged loss
    of 4 (chance - 1) is one unweighted term 1 nat below chance, ln(K + 1)
    with a queue of K, ln(global batch) with in-batch negatives; the check
    must not call that NOT LEARNING (it read the weighted sum: issue 36)."""
    torch.manual_seed(0)
    model = tiny_mocov3(
        queue=dict(type='NegativeKeyQueue', size=15, dim=DIM_V3
                   ) if queue else None)
    runner = fake_runner(model)
    runner.train_dataloader = loader_of_4()
    hook = RepresentationHealthHook(interval=1, on_not_learning='stop')
    hook.before_train(runner)
    hook.before_train_iter(runner, batch_idx=0)
    model.loss(list(torch.randn(2, 4, 3, 32, 32)), samples(range(4)))
    hook.after_train_iter(runner, batch_idx=0)
    assert hook._terms == 2
    hook._gaps = []  # the loss alone decides here
    chance = math.log(16 if queue else 4)
    hub = runner.message_hub
    hub.log_scalars.pop('train/loss', None)
    for _ in range(50):
        hub.update_scalar('train/loss', 2.0 * 2 * (chance - 1.0))
    hook.check_learning(runner)  # 'stop': raises if it misjudged
    assert hook.not_learning['learning']
    assert hook.not_learning['loss'] == pytest.approx(chance - 1.0)
    assert hook.not_learning['chance'] == pytest.approx(chance)
    # at chance level it is called so, with the unweighted figure
    for _ in range(50):
        hub.update_scalar('train/loss', 2.0 * 2 * chance)
    hook.not_learning = None
    from mocoplug.engine.hooks.representation_health_hook import \
        NotLearningError
    with pytest.raises(NotLearningError, match='one term, unweighted'):
        hook.check_learning(runner)


def test_the_not_learning_hint_names_the_crops_area_range():
    """'Views too hard or too easy' names the area range a crop takes
    (crop_ratio_range), not RandomResizedCrop's output size (``scale``)."""
    from mocoplug.datasets import DigitsDataset
    runner = fake_runner(tiny_moco())
    runner.train_dataloader = SimpleNamespace(
        batch_size=4,
        dataset=DigitsDataset(
            split='train',
            indices=4,
            pipeline=[
                dict(
                    type='RandomResizedCrop',
                    scale=96,
                    crop_ratio_range=(0.2, 1.0))
            ]))
    hook = RepresentationHealthHook()
    hook._model = runner.model
    hint = hook.not_learning_causes(runner)[-1]
    assert hint == ('Views too hard or too easy; this run crops 20% to 100% '
                    'of the image area (crop_ratio_range).')
