# Copyright (c) mocoplug contributors. All rights reserved.
"""``mmcv._ext`` for mmcv-lite: the compiled kernels mmdet's model zoo
calls, served by torchvision and torch under mmcv's names and calling
conventions.

mmcv's Python ops (``mmcv.ops.RoIAlign``, ``DeformConv2d``,
``sigmoid_focal_loss``, ...) call kernels of the extension ``mmcv._ext``,
which mmcv-lite lacks. :class:`ServedOps` stands in for it (found by
:mod:`mocoplug_site`'s import hook when no compiled ``mmcv._ext`` is, or put
in place by ``import mocoplug``); every other kernel raises
:class:`MMCVOpNotServedError` when called. Why each kernel is the same
computation as mmcv's: docs/design_notes.md, "mmcv's ops from torchvision".
"""
import importlib.machinery
import types

import torch
import torch.nn.functional as F

EXT_NAME = 'mmcv._ext'
FULL_MMCV = ('`make setup-full` (mmcv 2.1.0 compiled with its ops; on a '
             'machine with the CUDA toolkit it builds the CUDA kernels, '
             'FORCE_CUDA=1)')


def _torchvision_ops():
    """``torchvision.ops`` (which registers ``torch.ops.torchvision``),
    imported at the first served kernel call: a process that never calls
    one never imports torchvision for them."""
    import torchvision.ops
    return torchvision.ops


class MMCVOpNotServedError(RuntimeError):
    """An mmcv kernel that neither a compiled mmcv nor mocoplug serves."""


# ---- the kernels, under mmcv's names and calling conventions ---------------
# mmcv's Python passes zero-filled gradient buffers; the kernels write them.


def nms(boxes, scores, iou_threshold: float, offset: int):
    """Indices of the boxes greedy NMS keeps, by decreasing score; box
    sides are ``x2 - x1 + offset``."""
    if offset:  # the same IoU as the boxes grown by `offset` at x2, y2
        boxes = torch.cat([boxes[:, :2], boxes[:, 2:] + offset], dim=1)
    return _torchvision_ops().nms(boxes, scores, iou_threshold)


def _check_avg(pool_mode: int) -> None:
    if pool_mode != 1:
        raise MMCVOpNotServedError(
            "RoIAlign with pool_mode='max' has no torchvision kernel "
            "(torchvision averages, pool_mode='avg'); it needs mmcv's "
            f'compiled ops: {FULL_MMCV}.')


def roi_align_forward(input, rois, output, argmax_y, argmax_x,
                      aligned_height: int, aligned_width: int,
                      spatial_scale: float, sampling_ratio: int,
                      pool_mode: int, aligned: bool) -> None:
    """RoIAlign of ``rois`` (``(K, 5)``: batch index, x1, y1, x2, y2) into
    ``output``; average pooling only (the argmax buffers stay unused)."""
    _check_avg(pool_mode)
    output.copy_(_torchvision_ops().roi_align(input, rois,
                                              (aligned_height, aligned_width),
                                              spatial_scale, sampling_ratio,
                                              aligned))


def roi_align_backward(grad_output, rois, argmax_y, argmax_x, grad_input,
                       aligned_height: int, aligned_width: int,
                       spatial_scale: float, sampling_ratio: int,
                       pool_mode: int, aligned: bool) -> None:
    """The gradient of RoIAlign with respect to its input."""
    _check_avg(pool_mode)
    n, c, h, w = grad_input.shape
    _torchvision_ops()
    grad_input.copy_(
        torch.ops.torchvision._roi_align_backward(grad_output, rois,
                                                  spatial_scale,
                                                  aligned_height,
                                                  aligned_width, n, c, h, w,
                                                  sampling_ratio, aligned))


def _deform(input,
            weight,
            offset,
            mask,
            bias,
            stride,
            pad,
            dilation,
            group,
            deform_group,
            grad_output=None):
    """torchvision's deformable convolution (``mask=None``: v1), or with
    ``grad_output`` its gradients (input, weight, offset, mask, bias).

    Offsets are laid out as mmcv's: per deformable group, per kernel
    position (row-major), (dy, dx); the mask per group and position."""
    use_mask = mask is not None
    if not use_mask:  # what torchvision.ops.deform_conv2d passes
        mask = input.new_zeros(input.shape[0], 1)
    if bias is None:
        bias = weight.new_zeros(weight.shape[0])
    args = (input, weight, offset, mask, bias, *stride, *pad, *dilation, group,
            deform_group, use_mask)
    _torchvision_ops()
    if grad_output is None:
        return torch.ops.torchvision.deform_conv2d(*args)
    return torch.ops.torchvision._deform_conv2d_backward(grad_output, *args)


def deform_conv_forward(input, weight, offset, output, columns, ones, kW, kH,
                        dW, dH, padW, padH, dilationW, dilationH, group,
                        deformable_group, im2col_step) -> None:
    """Deformable convolution v1 (Dai et al. 2017) into ``output``.

    ``im2col_step`` only splits mmcv's batch for memory; the result does
    not depend on it."""
    output.copy_(
        _deform(input, weight, offset, None, None, (dH, dW), (padH, padW),
                (dilationH, dilationW), group, deformable_group))


def deform_conv_backward_input(input, offset, gradOutput, gradInput,
                               gradOffset, weight, columns, kW, kH, dW, dH,
                               padW, padH, dilationW, dilationH, group,
                               deformable_group, im2col_step) -> None:
    """The gradients of deformable convolution v1 with respect to its
    input and offsets."""
    grads = _deform(input, weight, offset, None, None, (dH, dW), (padH, padW),
                    (dilationH, dilationW), group, deformable_group,
                    gradOutput)
    gradInput.copy_(grads[0])
    gradOffset.copy_(grads[2])


def deform_conv_backward_parameters(input, offset, gradOutput, gradWeight,
                                    columns, ones, kW, kH, dW, dH, padW, padH,
                                    dilationW, dilationH, group,
                                    deformable_group, scale,
                                    im2col_step) -> None:
    """Adds ``scale`` x the gradient of deformable convolution v1 with
    respect to its weight to ``gradWeight``, as mmcv's kernel does.

    torchvision computes all gradients in one call, so with both of mmcv's
    backward calls the convolution's backward runs twice. The weight is not
    passed; the weight gradient does not depend on it (the convolution is
    linear in it), so zeros of its shape stand in."""
    grads = _deform(input, torch.zeros_like(gradWeight), offset, None, None,
                    (dH, dW), (padH, padW), (dilationH, dilationW), group,
                    deformable_group, gradOutput)
    gradWeight.add_(grads[1], alpha=scale)


def modulated_deform_conv_forward(input, weight, bias, ones, offset, mask,
                                  output, columns, kernel_h, kernel_w,
                                  stride_h, stride_w, pad_h, pad_w, dilation_h,
                                  dilation_w, group, deformable_group,
                                  with_bias) -> None:
    """Modulated deformable convolution (DCNv2, Zhu et al. 2019) into
    ``output``."""
    output.copy_(
        _deform(input, weight, offset, mask, bias if with_bias else None,
                (stride_h, stride_w), (pad_h, pad_w), (dilation_h, dilation_w),
                group, deformable_group))


def modulated_deform_conv_backward(input, weight, bias, ones, offset, mask,
                                   columns, grad_input, grad_weight, grad_bias,
                                   grad_offset, grad_mask, grad_output,
                                   kernel_h, kernel_w, stride_h, stride_w,
                                   pad_h, pad_w, dilation_h, dilation_w, group,
                                   deformable_group, with_bias) -> None:
    """The gradients of modulated deformable convolution."""
    grads = _deform(input, weight, offset, mask, bias if with_bias else None,
                    (stride_h, stride_w), (pad_h, pad_w),
                    (dilation_h, dilation_w), group, deformable_group,
                    grad_output)
    for buffer, grad in zip((grad_input, grad_weight, grad_offset, grad_mask),
                            grads):
        buffer.copy_(grad)
    if with_bias:
        grad_bias.copy_(grads[4])


def _focal_terms(input, target, weight):
    """p = sigmoid(x), log p, log(1 - p), the one-hot target and the row
    weight. As in mmcv's kernel a target outside [0, C) (C = background)
    marks no class, and a class weight is ``weight[target]`` (an index
    error for a background target)."""
    classes = torch.arange(input.shape[1], device=input.device)
    onehot = (target.unsqueeze(1) == classes).to(input.dtype)
    row = weight[target].unsqueeze(1) if weight.numel() else 1
    # log-sigmoid: equal to mmcv's log(max(p, FLT_MIN)) where p does not
    # round to 0 or 1, exact beyond (|x| > ~17 in float32; design notes)
    return (torch.sigmoid(input), F.logsigmoid(input), F.logsigmoid(-input),
            onehot, row)


def sigmoid_focal_loss_forward(input, target, weight, output, gamma: float,
                               alpha: float) -> None:
    """Focal loss (Lin et al. 2017) per logit into ``output``:
    -alpha (1-p)^gamma log p for the target class, -(1-alpha) p^gamma
    log(1-p) for the others, times ``weight[target]`` if given."""
    p, log_p, log_q, t, row = _focal_terms(input, target, weight)
    loss = (-alpha * t * (1 - p).pow(gamma) * log_p - (1 - alpha) *
            (1 - t) * p.pow(gamma) * log_q)
    output.copy_(loss * row)


def sigmoid_focal_loss_backward(input, target, weight, grad_input,
                                gamma: float, alpha: float) -> None:
    """d(focal loss)/dx per logit into ``grad_input``:
    -alpha (1-p)^gamma (1 - p - gamma p log p) for the target class,
    -(1-alpha) p^gamma (gamma (1-p) log(1-p) - p) for the others."""
    p, log_p, log_q, t, row = _focal_terms(input, target, weight)
    q = 1 - p
    grad = (-alpha * t * q.pow(gamma) * (q - gamma * p * log_p) - (1 - alpha) *
            (1 - t) * p.pow(gamma) * (gamma * q * log_q - p))
    grad_input.copy_(grad * row)


def _ms_deform_attn(value, shapes, locations, weights):
    from mmcv.ops.multi_scale_deform_attn import \
        multi_scale_deformable_attn_pytorch
    return multi_scale_deformable_attn_pytorch(value, shapes, locations,
                                               weights)


def ms_deform_attn_forward(value, value_spatial_shapes,
                           value_level_start_index, sampling_locations,
                           attention_weights, im2col_step):
    """Multi-scale deformable attention (Zhu et al. 2021, Deformable DETR),
    by mmcv's own PyTorch formulation (bilinear sampling with zeros
    outside, ``align_corners=False``, as its CUDA kernel)."""
    with torch.no_grad():
        return _ms_deform_attn(value, value_spatial_shapes, sampling_locations,
                               attention_weights)


def ms_deform_attn_backward(value, value_spatial_shapes,
                            value_level_start_index, sampling_locations,
                            attention_weights, grad_output, grad_value,
                            grad_sampling_loc, grad_attn_weight,
                            im2col_step) -> None:
    """Its gradients with respect to the values, the sampling locations
    and the attention weights (autograd through the formulation)."""
    inputs = [
        t.detach().requires_grad_()
        for t in (value, sampling_locations, attention_weights)
    ]
    with torch.enable_grad():
        out = _ms_deform_attn(inputs[0], value_spatial_shapes, inputs[1],
                              inputs[2])
        grads = torch.autograd.grad(out, inputs, grad_output)
    for buffer, grad in zip((grad_value, grad_sampling_loc, grad_attn_weight),
                            grads):
        buffer.copy_(grad)


SERVED = {
    f.__name__: f
    for f in (nms, roi_align_forward, roi_align_backward, deform_conv_forward,
              deform_conv_backward_input, deform_conv_backward_parameters,
              modulated_deform_conv_forward, modulated_deform_conv_backward,
              sigmoid_focal_loss_forward, sigmoid_focal_loss_backward,
              ms_deform_attn_forward, ms_deform_attn_backward)
}


class ServedOps(types.ModuleType):
    """The module that stands in for ``mmcv._ext``: the kernels above, and
    for every other name a function that raises
    :class:`MMCVOpNotServedError` when called (mmcv and mmdet import many
    kernels at module level)."""

    def __init__(self, reason: str = '') -> None:
        super().__init__(EXT_NAME, 'mmcv ops served by torchvision (mocoplug)')
        self.__spec__ = importlib.machinery.ModuleSpec(EXT_NAME, None)
        self.reason = reason

    def __getattr__(self, name: str):
        if name.startswith('__'):
            raise AttributeError(name)

        def not_served(*args, **kwargs):
            raise MMCVOpNotServedError(
                f'mmcv op kernel `{name}` is not available: this mmcv has '
                f'no compiled ops ({self.reason or "mmcv-lite"}), and '
                'mocoplug serves only ' + ', '.join(SERVED) + '. For '
                f'`{name}` install mmcv with its ops: {FULL_MMCV}.')

        not_served.__name__ = name
        return not_served

    @staticmethod
    def get_compiler_version() -> str:
        import torchvision
        return f'torchvision {torchvision.__version__} (served by mocoplug)'

    @staticmethod
    def get_compiling_cuda_version() -> str:
        return torch.version.cuda or 'not available'


for _name, _kernel in SERVED.items():
    setattr(ServedOps, _name, staticmethod(_kernel))
