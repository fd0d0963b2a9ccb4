# Copyright (c) mocoplug contributors. All rights reserved.
"""The pretraining configs ask for torch's fused SGD / AdamW kernels, and
those update the weights as torch's default (for-loop) implementation does.

Both optimizers are fed the SAME gradient sequence (drawn once, copied into
both parameter sets): only the optimizer kernels are compared. Computing the
gradients with each optimizer's own model would compare noise: after one
step the weights differ by an ulp, the next gradients differ in round-off,
and Adam turns a round-off-sized gradient into a step of about +-lr.

Neither kernel is bit-identical to the other on every CPU: the fused kernels
compute ``a + b * c`` as a multiply then an add in their vector body (which
the compiler may contract into an FMA or not; fused Adam's scalar tail
even multiplies by double constants), while the default implementation's
``add_(.., alpha=)`` is an FMA on AVX2/AVX-512 and a multiply-add on
``ATEN_CPU_CAPABILITY=default``; where the vector body ends depends on the
vector width. So both
are checked against a float64 reference written from the update formula,
within a bound derived from the number of float32 roundings each element
goes through (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
ed., 2002, Lemma 3.1 and §3.1): the bound holds for any order of the
operations, with or without FMA, on any ISA and thread count (the updates
are elementwise: no reduction whose order could change).
"""
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import OPTIMIZERS

from .conftest import config_path

FUSED = {
    'mocov2_r50_8xb32.py': 'SGD',
    'mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py': 'SGD',
    'mocov2/mocov2_r50_8xb32-coslr-800e_in1k.py': 'SGD',
    'mocov1/mocov1_r50_8xb32-steplr-200e_in1k.py': 'SGD',
    'mocov2/mocov2_r50_8xb32-coslr-200e_folder.py': 'SGD',
    'mocov2/mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py': 'SGD',
    'mocov3/mocov3_vit-small-p16_16xb256-amp-coslr-300e_in1k.py': 'AdamW',
    'mocov3/mocov3_vit-base-p16_16xb256-amp-coslr-300e_in1k.py': 'AdamW',
}
STEPS = 6
U = 2.0**-24  # unit round-off of float32 (round to nearest)


def gamma(k: int) -> float:
    """Higham's gamma_k = k u / (1 - k u): the relative error of a product
    of k factors (1 + delta_i), |delta_i| <= u."""
    return k * U / (1 - k * U)


def _initial_parameters():
    """The weights of a small conv net: tensors of 5 to 1440 elements, so
    both the vector body and the scalar tail of the kernels run."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 5))
    return [p.detach().clone() for p in model.parameters()]


def _gradients(shapes):
    """STEPS gradients per tensor: random signs (momenta that cancel),
    magnitudes log-uniform in [1e-9, 1] (from round-off-sized to large;
    all squares are normal float32 numbers) and 5% exact zeros."""
    gen = torch.Generator().manual_seed(1)
    sequence = []
    for _ in range(STEPS):
        grads = []
        for shape in shapes:
            sign = torch.randn(shape, generator=gen).sign()
            magnitude = 10**(-9 * torch.rand(shape, generator=gen))
            zero = torch.rand(shape, generator=gen) < 0.05
            grads.append(torch.where(zero, 0., sign * magnitude))
        sequence.append(grads)
    return sequence


def _replay(optimizer_cfg, initial, gradients):
    """Run the optimizer on a copy of `initial` with the given gradients."""
    params = [p.clone().requires_grad_() for p in initial]
    optimizer = OPTIMIZERS.build(dict(optimizer_cfg, params=params))
    for grads in gradients:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        optimizer.step()
    return [p.detach() for p in params]


def _sgd_reference(cfg, p, grads):
    """SGD with momentum and coupled weight decay as torch defines it
    (dampening 0, no Nesterov), in float64: d = g + wd p; b = d at the first
    step, else mu b + d; p <- p - lr b. Returns the weights and the bound.

    Only + and x: by Lemma 3.1 a float32 evaluation is within gamma_k times
    the same recurrence run on absolute values, k being the longest chain
    of roundings: per step 3 for the constants wd, mu, lr rounded to
    float32, 2 each for d, b and p (multiply, add; 1 with an FMA)."""
    assert not cfg.get('nesterov') and not cfg.get('dampening')
    assert not cfg.get('maximize')
    lr, mu = cfg['lr'], cfg.get('momentum', 0.)
    wd = cfg.get('weight_decay', 0.)
    p = p.double()
    p_abs, buf, buf_abs = p.abs(), None, None
    for g in grads:
        g = g.double()
        d, d_abs = g + wd * p, g.abs() + wd * p_abs
        if buf is None or mu == 0:
            buf, buf_abs = d, d_abs
        else:
            buf, buf_abs = mu * buf + d, mu * buf_abs + d_abs
        p, p_abs = p - lr * buf, p_abs + lr * buf_abs
    # +1: the float64 reference's own error, 2^-29 of float32's
    return p, gamma(9 * len(grads) + 1) * p_abs


def _adamw_reference(cfg, p, grads):
    """AdamW (Loshchilov & Hutter, ICLR 2019, Algorithm 2, with torch's
    bias correction) in float64: p <- p (1 - lr wd); m <- b1 m + (1-b1) g;
    v <- b2 v + (1-b2) g^2; p <- p - s_t m / d_t with s_t = lr/(1-b1^t),
    d_t = sqrt(v / (1-b2^t)) + eps. Returns the weights and the bound.

    First-order error of a float32 evaluation (u = 2^-24), per element:
    - m and v: each step rounds the constants, the products and the sum,
      <= 8 roundings of terms no larger than those of b1 m + (1-b1) g (or
      twice as large for torch's ``lerp``, a + w (b - a) with w <= 1/2,
      which rounds 3 times), so |dm_t| <= 8 t u mbar_t, with mbar_t =
      b1 mbar + (1-b1)|g| the recurrence on absolute values, and
      |dv_t| <= 8 t u v_t (v >= 0);
    - d_t: sqrt halves the relative error of v; the constant sqrt(1-b2^t),
      the division and the addition of eps add 3u: <= (4t + 3) u relative;
    - the step s_t m / d_t: 3 more roundings (constant, divide, multiply),
      so its error is <= s_t (mbar_t / d_t) (12 t + 6) u, as |m| <= mbar;
    - p (1 - lr wd) - step: constant, multiply, subtract: 3u (|p| + |step|).
    The sum over the steps is doubled for the dropped second-order terms
    and the float64 reference's own error (2^-29 of float32's)."""
    assert not cfg.get('amsgrad') and not cfg.get('maximize')
    lr, wd = cfg['lr'], cfg.get('weight_decay', 1e-2)
    (b1, b2), eps = cfg.get('betas', (0.9, 0.999)), cfg.get('eps', 1e-8)
    assert 0.5 <= b1 < 1 and 0.5 <= b2 < 1  # lerp weights <= 1/2
    p = p.double()
    m, m_abs, v = torch.zeros_like(p), torch.zeros_like(p), torch.zeros_like(p)
    bound = torch.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = g.double()
        p_before = p * (1 - lr * wd)
        m, m_abs = b1 * m + (1 - b1) * g, b1 * m_abs + (1 - b1) * g.abs()
        v = b2 * v + (1 - b2) * g * g
        s, d = lr / (1 - b1**t), (v / (1 - b2**t)).sqrt() + eps
        step = s * m / d
        p = p_before - step
        bound += (
            s * m_abs / d * (12 * t + 6) * U + 3 * U *
            (p_before.abs() + step.abs()))
    return p, 2 * bound


REFERENCES = dict(SGD=_sgd_reference, AdamW=_adamw_reference)


@pytest.mark.parametrize('name', sorted(FUSED))
def test_config_uses_the_fused_kernel_and_it_updates_as_the_default(name):
    optimizer_cfg = Config.fromfile(
        config_path(name)).optim_wrapper.optimizer.to_dict()
    assert optimizer_cfg['type'] == FUSED[name]
    assert optimizer_cfg.get('fused') is True
    built = OPTIMIZERS.build(
        dict(optimizer_cfg, params=[torch.zeros(2, requires_grad=True)]))
    assert built.defaults['fused'] is True
    initial = _initial_parameters()
    gradients = _gradients([p.shape for p in initial])
    fused = _replay(optimizer_cfg, initial, gradients)
    default = _replay(
        dict(optimizer_cfg, fused=None, foreach=False), initial, gradients)
    for i, (a, b, p0) in enumerate(zip(fused, default, initial)):
        ref, bound = REFERENCES[FUSED[name]](optimizer_cfg, p0,
                                             [grads[i] for grads in gradients])
        # the bound is far below how far the weights moved: the comparison
        # is not trivial (a wrong formula moves them elsewhere)
        assert bound.norm() < 1e-3 * (ref - p0.double()).norm()
        assert ((a.double() - ref).abs() <= bound).all(), i
        assert ((b.double() - ref).abs() <= bound).all(), i
        # hence the fused kernel updates as the default one does
        assert ((a.double() - b.double()).abs() <= 2 * bound).all(), i
