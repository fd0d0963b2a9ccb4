# Copyright (c) mocoplug contributors. All rights reserved.
"""MoCoV3LARS computes the update of the MoCo v3 authors' LARS: against a
float64 reference written from the formula, against hand computations, and
against mmpretrain's LARS on the three points where the two differ."""
import copy
import io
import math

import pytest
import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper
from mmengine.optim.scheduler import CosineAnnealingLR, LinearLR
from mmpretrain.engine.optimizers import LARS

from mocoplug.engine.optimizers import LARSOptimWrapperConstructor, MoCoV3LARS
from mocoplug.models import MoCoProjectionNeck
from mocoplug.registry import OPTIMIZERS

ETA = 1e-3  # the trust coefficient of the official code and of the config
U64 = 2.**-53  # unit round-off of float64

# --------------------------------------------------------------------------
# The reference: the formula, one parameter at a time
# --------------------------------------------------------------------------


def reference_lars(params, hyper, grads, lrs):
    """MoCo v3's LARS written from its formula, in plain Python loops (a
    branch on the norms' values is fine here).

    Args:
        params (dict): name -> initial value.
        hyper (dict): name -> dict(weight_decay, momentum, eta, nesterov).
        grads (list[dict]): per step, name -> gradient (None: no gradient).
        lrs (list[dict]): per step, name -> learning rate.

    Returns:
        dict: name -> value after all steps.
    """
    p = {name: value.clone() for name, value in params.items()}
    mu = {name: torch.zeros_like(value) for name, value in params.items()}
    for step_grads, step_lrs in zip(grads, lrs):
        for name in p:
            g = step_grads[name]
            if g is None:
                continue
            h = hyper[name]
            if p[name].ndim > 1:
                d = g + h['weight_decay'] * p[name]
                p_norm = torch.sqrt((p[name] * p[name]).sum())
                d_norm = torch.sqrt((d * d).sum())
                if p_norm > 0 and d_norm > 0:
                    d = h['eta'] * p_norm / d_norm * d
            else:
                d = g
            mu[name] = h['momentum'] * mu[name] + d
            if h['nesterov']:
                p[name] = p[name] - step_lrs[name] * (
                    d + h['momentum'] * mu[name])
            else:
                p[name] = p[name] - step_lrs[name] * mu[name]
    return p


# --------------------------------------------------------------------------
# A parameter set with every case: weights of several shapes, a weight whose
# gradient is zero, a weight initialised to zero, 1-D parameters in a group
# with weight decay, a parameter without gradient, two groups
# --------------------------------------------------------------------------

SHAPES = {
    'fc': (5, 4),
    'conv': (3, 2, 2, 2),
    'zero_grad': (4, 3),
    'zero_init': (3, 3),
    'gamma': (5, ),
    'frozen': (2, 2),
    'fc2': (6, 2),
    'bias': (3, ),
}
GROUP_A = ('fc', 'conv', 'zero_grad', 'zero_init', 'gamma', 'frozen')
GROUP_B = ('fc2', 'bias')
STEPS = 6


def uniform(shape, generator, dtype):
    """Values in [-1, 1): bounded, so the round-off bound below holds."""
    return torch.rand(shape, generator=generator, dtype=dtype) * 2 - 1


def initial_params(dtypes=None):
    gen = torch.Generator().manual_seed(0)
    params = {}
    for name, shape in SHAPES.items():
        dtype = (dtypes or {}).get(name, torch.float64)
        params[name] = uniform(shape, gen, dtype)
    params['zero_init'].zero_()
    return params


def gradients(params):
    """Per step, name -> gradient: random, zero for 'zero_grad', None for
    'frozen'."""
    gen = torch.Generator().manual_seed(1)
    steps = []
    for _ in range(STEPS):
        grads = {
            name: uniform(value.shape, gen, value.dtype)
            for name, value in params.items()
        }
        grads['zero_grad'].zero_()
        grads['frozen'] = None
        steps.append(grads)
    return steps


def run_ours(params, grads, nesterov, foreach, resume_at=None):
    """Train copies of ``params`` with MoCoV3LARS for all steps, the lr set
    by mmengine's warm-up and cosine schedulers (per iteration); with
    ``resume_at``, rebuild the optimizer from its state dict at that step.
    Returns the final values, the lrs of each step and the optimizer."""
    tensors = {
        name: nn.Parameter(value.clone())
        for name, value in params.items()
    }

    def build(tensors):
        groups = [
            dict(params=[tensors[n] for n in GROUP_A]),
            dict(
                params=[tensors[n] for n in GROUP_B],
                lr=0.5,
                momentum=0.8,
                weight_decay=0.05),
        ]
        return MoCoV3LARS(
            groups,
            lr=0.8,
            momentum=0.9,
            weight_decay=0.1,
            nesterov=nesterov,
            foreach=foreach)

    def schedule(optimizer):
        wrapper = OptimWrapper(optimizer)
        return [
            LinearLR(
                wrapper, start_factor=0.1, begin=0, end=3, by_epoch=False),
            CosineAnnealingLR(
                wrapper, T_max=3, begin=3, end=STEPS, by_epoch=False)
        ]

    optimizer = build(tensors)
    schedulers = schedule(optimizer)
    lrs = []
    for step, step_grads in enumerate(grads):
        if step == resume_at:
            buffer = io.BytesIO()
            torch.save(
                dict(
                    optimizer=optimizer.state_dict(),
                    schedulers=[s.state_dict() for s in schedulers]), buffer)
            buffer.seek(0)
            saved = torch.load(buffer)
            tensors = {
                name: nn.Parameter(value.detach().clone())
                for name, value in tensors.items()
            }
            # as mmengine's Runner resumes: build, then load the states
            optimizer = build(tensors)
            schedulers = schedule(optimizer)
            optimizer.load_state_dict(saved['optimizer'])
            for scheduler, state in zip(schedulers, saved['schedulers']):
                scheduler.load_state_dict(state)
        for name, grad in step_grads.items():
            tensors[name].grad = grad
        group_of = {n: i for i, g in enumerate((GROUP_A, GROUP_B)) for n in g}
        lrs.append({
            name: optimizer.param_groups[group_of[name]]['lr']
            for name in tensors
        })
        optimizer.step()
        for scheduler in schedulers:
            scheduler.step()
    return {n: t.detach() for n, t in tensors.items()}, lrs, optimizer


def hyper(nesterov):
    a = dict(weight_decay=0.1, momentum=0.9, eta=ETA, nesterov=nesterov)
    b = dict(weight_decay=0.05, momentum=0.8, eta=ETA, nesterov=nesterov)
    return {n: a if n in GROUP_A else b for n in SHAPES}


# --------------------------------------------------------------------------
# The formula
# --------------------------------------------------------------------------


@pytest.mark.parametrize('foreach', [False, True], ids=['single', 'foreach'])
@pytest.mark.parametrize('nesterov', [False, True], ids=['sgd', 'nesterov'])
def test_matches_the_formula_over_steps_with_a_changing_lr(nesterov, foreach):
    params = initial_params()
    grads = gradients(params)
    ours, lrs, optimizer = run_ours(params, grads, nesterov, foreach)
    # the lr changed at every step: linear warm-up, then cosine
    factors = [0.1, 0.55, 1., 1., 0.75, 0.25]
    assert [lr['fc'] for lr in lrs] == pytest.approx([.8 * f for f in factors])
    assert [lr['bias']
            for lr in lrs] == pytest.approx([.5 * f for f in factors])
    expected = reference_lars(params, hyper(nesterov), grads, lrs)
    # Bound: inputs lie in [-1, 1], lr <= 0.8, 6 steps. The largest values
    # are the 1-D parameters' (not adapted): |mu| <= 6, |p| < 1 + 6 x 0.8 x
    # 6 < 30. Both sides make the same float64 operations (each rounding
    # by <= u = 2^-53 relative) but for (i) p + (-lr) mu, which a kernel
    # may fuse (one rounding instead of two), and (ii) the norms, which may
    # be summed in another order (<= 25 u relative for <= 24 terms), and
    # eta ||p|| / ||d||, associated otherwise. (i) costs < 2 u |p| +
    # u |lr mu| < 70 u per step, carried to the end: < 6 x 70 u < 5e-14.
    # (ii) scales an adapted step, each element <= lr eta ||p|| x 6 (the
    # momentum sum) < 3e-2, by < 60 u relative: < 1e-15, and an adapted
    # update depends on p only through wd p and eta ||p|| (a factor < 1e-2
    # on an error of p). Total < 1e-13; a wrong formula moves weights by
    # >= 1e-6 (the steps are ~1e-3 and the variants differ by 10%-50%).
    for name, value in expected.items():
        torch.testing.assert_close(
            ours[name], value, rtol=0, atol=1e-12, msg=name)
    # not trivially: every parameter with a gradient moved, the frozen one
    # did not and has no state
    for name in SHAPES:
        moved = not torch.equal(ours[name], params[name])
        assert moved == (name != 'frozen'), name
    frozen = optimizer.param_groups[0]['params'][GROUP_A.index('frozen')]
    assert frozen not in optimizer.state


def test_zero_gradient_weight_shrinks_by_lr_eta():
    """g = 0: d = wd p, q = eta ||p|| / (wd ||p||) = eta / wd, so the step
    is lr q d = lr eta p whatever wd (the issue's "eta / wd")."""
    p = nn.Parameter(torch.tensor([[3., 4.]], dtype=torch.float64))
    p.grad = torch.zeros_like(p)
    before = p.detach().clone()
    lr = 0.5
    MoCoV3LARS([p], lr=lr, weight_decay=0.1, eta=ETA).step()
    # two roundings of a value <= 4: <= 2 x 4 u < 1e-15
    torch.testing.assert_close(
        p.detach(), before * (1 - lr * ETA), rtol=0, atol=1e-15)


def test_zero_weight_is_not_adapted():
    """||p|| = 0 (a zero-initialised weight): q = 1, the step is lr g."""
    p = nn.Parameter(torch.zeros(2, 2, dtype=torch.float64))
    p.grad = torch.tensor([[1., -2.], [0.5, 3.]], dtype=torch.float64)
    MoCoV3LARS([p], lr=0.5, weight_decay=0.1).step()
    # exact: mu = 0.9 x 0 + g, and 0 + (-0.5) mu is a power of two times g
    torch.testing.assert_close(p.detach(), -0.5 * p.grad, rtol=0, atol=0)


# --------------------------------------------------------------------------
# mmpretrain's LARS differs on exactly three points
# --------------------------------------------------------------------------


def one_step(optimizer_cls, p0, g, lr, lars_exclude=False, **kwargs):
    p = nn.Parameter(p0.clone())
    p.grad = g.clone()
    group = dict(params=[p])
    if lars_exclude:
        group.update(lars_exclude=True, weight_decay=0.)
    optimizer_cls([group], lr=lr, **kwargs).step()
    return p.detach()


def test_a_trust_ratio_of_the_decayed_gradient():
    """(a) q = eta ||p|| / ||g + wd p|| (ours) against eta ||p|| / (||g||
    + wd ||p|| + eps) (mmpretrain's). With g orthogonal to p, ||p|| = ||g||
    = 5 and wd = 1: ||g + wd p|| = 5 sqrt(2) against 10."""
    p0 = torch.tensor([[3., 4.]], dtype=torch.float64)
    g = torch.tensor([[-4., 3.]], dtype=torch.float64)
    lr, wd = 0.5, 1.
    d = g + wd * p0
    ours = one_step(MoCoV3LARS, p0, g, lr, weight_decay=wd, eta=ETA)
    theirs = one_step(LARS, p0, g, lr, weight_decay=wd, eta=ETA, momentum=.9)
    # a few roundings of values <= 4: 1e-15
    torch.testing.assert_close(
        ours, p0 - lr * (ETA / math.sqrt(2)) * d, rtol=0, atol=1e-15)
    torch.testing.assert_close(
        theirs, p0 - lr * (ETA * 5 / (10 + 1e-8)) * d, rtol=0, atol=1e-15)
    assert (ours - theirs).abs().max() > 1e-5
    # and only there: with g parallel to p the triangle inequality is an
    # equality and the two agree up to mmpretrain's eps (a relative 1e-8 /
    # 10 of a step of lr eta ||p|| = 2.5e-3, i.e. 2.5e-12)
    g = 2 * p0
    ours = one_step(MoCoV3LARS, p0, g, lr, weight_decay=wd, eta=ETA)
    theirs = one_step(LARS, p0, g, lr, weight_decay=wd, eta=ETA, momentum=.9)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-11)


def test_b_zero_gradient_weight_shrinks_by_lr_eta_not_lr_wd():
    """(b) g = 0: ours q = eta / wd, a step of lr eta p; mmpretrain's sets
    q = 1 when ||g|| = 0, a step of lr wd p."""
    p0 = torch.tensor([[3., 4.]], dtype=torch.float64)
    g = torch.zeros_like(p0)
    lr, wd = 0.5, 0.1
    ours = one_step(MoCoV3LARS, p0, g, lr, weight_decay=wd, eta=ETA)
    theirs = one_step(LARS, p0, g, lr, weight_decay=wd, eta=ETA, momentum=.9)
    torch.testing.assert_close(ours, p0 * (1 - lr * ETA), rtol=0, atol=1e-15)
    torch.testing.assert_close(theirs, p0 * (1 - lr * wd), rtol=0, atol=1e-15)
    assert (ours - theirs).abs().max() > 0.1


def two_steps(optimizer_cls, p0, grads, lrs, **kwargs):
    """Two steps on a 1-D parameter (no decay, no adaptation in both)."""
    p = nn.Parameter(p0.clone())
    optimizer = optimizer_cls([dict(params=[p], lars_exclude=True)],
                              lr=lrs[0],
                              momentum=0.9,
                              **kwargs)
    for g, lr in zip(grads, lrs):
        optimizer.param_groups[0]['lr'] = lr
        p.grad = g.clone()
        optimizer.step()
    return p.detach()


def test_c_lr_multiplies_the_buffer_at_the_current_step():
    """(c) ours: p2 = p0 - lr1 g1 - lr2 (m g1 + g2); mmpretrain's folds
    each step's lr into the buffer: p2 = p0 - lr1 g1 - (m lr1 g1 + lr2 g2).
    On a 1-D parameter (excluded in both), so (a) and (b) play no part."""
    p0 = torch.tensor([1., -2., 0.5], dtype=torch.float64)
    g1 = torch.tensor([0.3, 0.1, -0.2], dtype=torch.float64)
    g2 = torch.tensor([-0.1, 0.4, 0.25], dtype=torch.float64)
    m, lr1, lr2 = 0.9, 0.1, 1.
    ours = two_steps(MoCoV3LARS, p0, [g1, g2], [lr1, lr2])
    theirs = two_steps(LARS, p0, [g1, g2], [lr1, lr2], weight_decay=0.)
    # a few roundings of values <= 2: 1e-15
    torch.testing.assert_close(
        ours, p0 - lr1 * g1 - lr2 * (m * g1 + g2), rtol=0, atol=1e-15)
    torch.testing.assert_close(
        theirs, p0 - lr1 * g1 - (m * lr1 * g1 + lr2 * g2), rtol=0, atol=1e-15)
    assert (ours - theirs).abs().max() > 0.01  # (lr2 - lr1) m |g1| >= 0.08
    # with a constant lr the two agree (to the round-off of the order of
    # the multiplications)
    ours = two_steps(MoCoV3LARS, p0, [g1, g2], [lr2, lr2])
    theirs = two_steps(LARS, p0, [g1, g2], [lr2, lr2], weight_decay=0.)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-15)


# --------------------------------------------------------------------------
# 1-D parameters: excluded by shape
# --------------------------------------------------------------------------


def test_the_projector_bn_is_excluded_by_shape():
    """One group, weight decay 0.1, no lars_exclude: the BN gamma/beta of
    MoCoProjectionNeck (``mlp.1``, a name no 'bn' rule matches) get lr g,
    the Linear weights the adapted, decayed update."""
    torch.manual_seed(0)
    neck = MoCoProjectionNeck(
        8, 16, 4, with_bias=False, with_bn=True, with_last_bn=True).double()
    named = dict(neck.named_parameters())
    assert {'mlp.1.weight', 'mlp.1.bias', 'mlp.4.weight'} <= set(named)
    for p in named.values():
        p.grad = torch.randn_like(p)
    before = {n: p.detach().clone() for n, p in named.items()}
    lr, wd = 0.5, 0.1
    MoCoV3LARS(neck.parameters(), lr=lr, weight_decay=wd, eta=ETA).step()
    excluded = set()
    for name, p in named.items():
        w, g = before[name], p.grad
        if p.ndim > 1:
            d = g + wd * w
            expected = w - lr * ETA * w.norm() / d.norm() * d
        else:
            excluded.add(name)
            expected = w - lr * g
        # values <= ~4, a few roundings (norms of <= 128 terms: 129 u
        # relative, on steps <= lr eta ||w|| < 1e-2): 1e-14
        torch.testing.assert_close(
            p.detach(), expected, rtol=0, atol=1e-14, msg=name)
    assert excluded == {n for n in named if n.startswith(('mlp.1.', 'mlp.4.'))}
    # decaying the BN gamma (1 at init) would have moved it by lr wd = 0.05
    w, g = before['mlp.1.weight'], named['mlp.1.weight'].grad
    decayed = w - lr * (g + wd * w)
    assert (named['mlp.1.weight'].detach() - decayed).abs().min() > 0.04


def test_lars_exclude_is_accepted_on_1d_groups_and_refused_on_weights():
    """mmpretrain-style groups: lars_exclude on 1-D parameters changes
    nothing (they are excluded anyway); on a weight it would be ignored, so
    it is refused."""
    bias = nn.Parameter(torch.ones(3))
    weight = nn.Parameter(torch.ones(3, 2))
    MoCoV3LARS([dict(params=[bias], lars_exclude=True)], lr=0.1)
    with pytest.raises(ValueError, match=r'lars_exclude.*\(3, 2\)'):
        MoCoV3LARS([dict(params=[weight, bias], lars_exclude=True)], lr=0.1)


def test_the_lars_constructor_refuses_it_and_says_why():
    with pytest.raises(ValueError, match='by shape itself'):
        LARSOptimWrapperConstructor(
            dict(optimizer=dict(type='MoCoV3LARS', lr=0.1)))


# --------------------------------------------------------------------------
# Implementations: foreach, state dict, no host read, GradScaler
# --------------------------------------------------------------------------


@pytest.mark.parametrize('nesterov', [False, True], ids=['sgd', 'nesterov'])
def test_foreach_equals_single_tensor(nesterov):
    """Both paths make the same elementwise operations; only the norms may
    be reduced in another order by the multi-tensor kernel (<= 25 u
    relative for <= 24 terms), which changes the adapted steps (< 1e-2 in
    size) by < 1e-15 and may flip the last bit of such a weight (|p| < 2):
    < 1e-14 after 6 steps in float64. In float32 (mixed in the same group
    to exercise the split by dtype) the same argument with u = 2^-24 gives
    6 flipped bits of |p| < 2 at most: 6 x 2.4e-7 < 2e-6."""
    dtypes = {'fc': torch.float32, 'gamma': torch.float32}
    params = initial_params(dtypes)
    grads = gradients(params)
    single, _, _ = run_ours(params, grads, nesterov, foreach=False)
    multi, _, _ = run_ours(params, grads, nesterov, foreach=True)
    for name in SHAPES:
        assert multi[name].dtype == params[name].dtype
        atol = 2e-6 if name in dtypes else 1e-14
        torch.testing.assert_close(
            multi[name], single[name], rtol=0, atol=atol, msg=name)


@pytest.mark.parametrize('foreach', [False, True], ids=['single', 'foreach'])
def test_state_dict_round_trips(foreach):
    """Resuming at step 3 from a saved state dict (buffers, lrs, schedulers)
    ends exactly where the uninterrupted run does: the same operations on
    the same values in one process (deterministic CPU kernels)."""
    params = initial_params()
    grads = gradients(params)
    straight, lrs, optimizer = run_ours(params, grads, False, foreach)
    resumed, lrs_resumed, _ = run_ours(
        params, grads, False, foreach, resume_at=3)
    assert lrs_resumed == lrs
    for name in SHAPES:
        assert torch.equal(resumed[name], straight[name]), name
    states = optimizer.state_dict()['state'].values()
    assert states and all(set(s) == {'mu'} for s in states)


def test_load_state_dict_refuses_another_optimizers_buffers():
    """mmpretrain's LARS keeps 'momentum_buffer' with the lr folded in:
    loading it here would misread it, so it is an error naming the fix."""
    p = nn.Parameter(torch.ones(3, 2))
    p.grad = torch.ones(3, 2)
    theirs = LARS([p], lr=0.1, momentum=0.9)
    theirs.step()
    ours = MoCoV3LARS([p], lr=0.1)
    with pytest.raises(ValueError, match="momentum_buffer.*load_from"):
        ours.load_state_dict(theirs.state_dict())


@pytest.mark.parametrize('foreach', [False, True], ids=['single', 'foreach'])
def test_step_reads_no_tensor_value_on_the_host(foreach, monkeypatch):
    """No .item(), no Python test of a tensor: on a GPU such a read
    synchronises (mmpretrain's LARS does two per weight). The GPU count
    itself is in ``benchmark.py lars`` (torch's sync debug mode)."""
    params = initial_params()
    grads = gradients(params)

    def refuse(*args, **kwargs):
        raise AssertionError('a tensor value was read on the host')

    for method in ('item', 'tolist', 'numpy', '__bool__', '__float__',
                   '__int__', '__index__'):
        monkeypatch.setattr(torch.Tensor, method, refuse)
    tensors = [nn.Parameter(v.clone()) for v in params.values()]
    optimizer = MoCoV3LARS(tensors, lr=0.5, weight_decay=0.1, foreach=foreach)
    for step_grads in grads[:2]:
        for t, g in zip(tensors, step_grads.values()):
            t.grad = g
        optimizer.step()
    monkeypatch.undo()
    assert not torch.equal(tensors[0], params['fc'])


def test_grad_scaler_unscales_before_the_step():
    """AMP (AmpOptimWrapper steps through a GradScaler): the scaler
    unscales the gradients before step and skips a step with non-finite
    gradients. Scaling by a power of two is exact, so the scaled run equals
    the plain one bit for bit."""

    def model_and_optimizer():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
        return model, MoCoV3LARS(model.parameters(), lr=0.5, weight_decay=0.1)

    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(2))
    plain, plain_opt = model_and_optimizer()
    scaled, scaled_opt = model_and_optimizer()
    scaler = torch.amp.GradScaler('cpu', init_scale=2.**12)
    for _ in range(2):
        plain_opt.zero_grad()
        plain(x).square().mean().backward()
        plain_opt.step()
        scaled_opt.zero_grad()
        scaler.scale(scaled(x).square().mean()).backward()
        scaler.step(scaled_opt)
        scaler.update()
    for a, b in zip(plain.parameters(), scaled.parameters()):
        assert torch.equal(a, b)
    # a non-finite gradient: the scaler skips the step
    before = [p.detach().clone() for p in scaled.parameters()]
    scaled_opt.zero_grad()
    scaler.scale(scaled(x).square().mean() * math.inf).backward()
    scaler.step(scaled_opt)
    scaler.update()
    for a, b in zip(scaled.parameters(), before):
        assert torch.equal(a, b)


def test_registered_with_its_arguments_checked():
    p = nn.Parameter(torch.ones(2, 2))
    built = OPTIMIZERS.build(
        dict(
            type='MoCoV3LARS',
            params=[p],
            lr=9.6,
            momentum=0.9,
            weight_decay=1e-6))
    assert isinstance(built, MoCoV3LARS)
    assert built.defaults == dict(
        lr=9.6,
        momentum=0.9,
        weight_decay=1e-6,
        eta=1e-3,
        nesterov=False,
        foreach=None)
    with pytest.raises(ValueError, match='weight_decay'):
        MoCoV3LARS([p], lr=0.1, weight_decay=-1.)
    with pytest.raises(ValueError, match='nesterov'):
        MoCoV3LARS([p], lr=0.1, momentum=0., nesterov=True)
    # deep copies (mmengine's EMA, checkpoint tools) keep it usable
    assert isinstance(copy.deepcopy(built), MoCoV3LARS)
