# Copyright (c) mocoplug contributors. All rights reserved.
"""The cheapest rows of ``benchmark.py detection-zoo`` that call each served
kernel: mmdet's packaged config trains a step and tests on the served
kernels. On the CPU mmdet runs its Python focal loss and deformable
attention; on CUDA it calls mmcv's kernels, which these rows then check."""
import pytest

# config, the device it calls the kernels on, the served kernels it must call
ROWS = [
    ('vfnet/vfnet_r50_fpn_1x_coco.py', None, {
        'deform_conv_forward', 'deform_conv_backward_input',
        'deform_conv_backward_parameters'
    }),
    ('dcnv2/faster-rcnn_r50-mdconv-c3-c5_fpn_1x_coco.py', None, {
        'modulated_deform_conv_forward', 'modulated_deform_conv_backward',
        'roi_align_forward', 'roi_align_backward', 'nms'
    }),
    ('retinanet/retinanet_r50_fpn_1x_coco.py', 'cuda',
     {'sigmoid_focal_loss_forward', 'sigmoid_focal_loss_backward'}),
    ('deformable_detr/deformable-detr_r50_16xb2-50e_coco.py', 'cuda',
     {'ms_deform_attn_forward', 'ms_deform_attn_backward'}),
]


@pytest.mark.parametrize(
    'config,calls_on,kernels', ROWS, ids=[r[0].split('/')[0] for r in ROWS])
def test_zoo_row_trains_and_tests_on_the_served_kernels(
        benchmark_command, device, config, calls_on, kernels):
    row = benchmark_command('detection-zoo').run_row(config, 64, device)
    assert row['status'] == 'ok', row
    if row['kernels'] == 'compiled mmcv':
        return  # a compiled mmcv ran its own kernels
    if calls_on in (None, device):
        assert kernels <= set(row['kernels'].split(', ')), row
