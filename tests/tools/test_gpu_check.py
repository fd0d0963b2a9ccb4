# Copyright (c) mocoplug contributors. All rights reserved.
"""tools/gpu_check.py in its CPU mode (toy sizes), every step, so that the
command a GPU machine runs first keeps working where CI has no GPU."""
import json
import math


def test_cpu_mode_runs_every_step_and_reports_values(load_tool, tmp_path,
                                                     capsys):
    gpu_check = load_tool('gpu_check')
    out = tmp_path / 'report.json'
    report = gpu_check.main([
        '--device', 'cpu', '--work-dir',
        str(tmp_path / 'work'), '--out',
        str(out), '--pytest-k', 'test_hand_written_wrap_around or '
        'test_update_math or test_nms_is_greedy_suppression'
    ])
    assert json.loads(out.read_text())['steps'].keys() == set(gpu_check.STEPS)
    assert report['mode'].startswith('cpu: toy sizes')
    steps = report['steps']
    assert {
        name: s['status']
        for name, s in steps.items()
    } == dict.fromkeys(gpu_check.STEPS, 'ok'), steps
    assert report['ok']

    # selected by marker from all of tests/: the queue's and the momentum
    # update's test and the 4 nms variants of tests/compat/test_mmcv_ops.py
    # ran on the CPU (their cuda variants were not even collected), passed
    tests = steps['device_tests']
    assert (tests['passed'], tests['failures'], tests['skipped']) == (6, 0, 0)
    assert '-m device --device cpu' in tests['command']
    assert ' tests -k test_hand_written_wrap_around or ' in tests['command']

    train = steps['train']
    iters = gpu_check.SIZES['cpu']['iters']
    assert set(train['runs']) == {'amp_off', 'amp_on', 'control_lr0'}
    for run in train['runs'].values():
        assert len(run['losses']) == run['iterations'] == iters
        assert all(math.isfinite(v) for v in run['losses'])
        assert run['images_per_s'] > 0
    # the lr-0 control and the float32 run see the same first batch with
    # the same weights: the same first loss, to the last bit
    assert train['runs']['control_lr0']['losses'][0] == \
        train['runs']['amp_off']['losses'][0]
    assert 'not judged' in train['note']  # 4 iterations tell nothing

    resume = steps['exact_resume']
    assert resume['checks']['bitwise_equal']
    assert resume['losses_after_resume']['full'] == \
        resume['losses_after_resume']['resumed']
    assert len(resume['losses_after_resume']['full']) == \
        resume['iterations'] - resume['resumed_at']

    bench = steps['benchmark']
    assert set(bench['runs']) == {
        'amp_off-channels_last_off', 'amp_on-channels_last_on'
    }
    for run in bench['runs'].values():
        assert set(run['median_ms']) == {'ours', 'mmpretrain', 'floor'}
    # the CPU's decode compared with itself: the same views every time
    assert bench['checks']['decode_repeatable']
    assert bench['decode']['vs_cpu_max_grey_levels'] == 0
    assert bench['device_augment']['decode'][0]['ms_per_image'] > 0

    # two gloo processes stand for the GPUs
    multi = steps['multi_gpu']
    assert (multi['processes'], multi['backend']) == (2, 'gloo')
    assert set(multi['runs']) == {
        'mocov2_shuffle_bn', 'mocov3_gathered_keys', 'mocov2_device_augment'
    }
    assert multi['checks']['exact_resume_bitwise_equal']
    assert multi['checks']['sharded_knn_as_whole_sets']
    assert multi['images_per_s_per_gpu'] > 0 and multi['scaling'] > 0

    knn = steps['knn']
    assert knn['config']['bank'] == 20000
    # random features, 100 classes: chance level, far below 10 %
    assert all(0 <= v < 10 for v in knn['sharded']['accuracy'].values())

    # a Faster R-CNN C4 step and test pass on the served mmcv kernels
    det = steps['detection']
    assert det['device'] == 'cpu' and det['checks'] == dict(
        losses_finite=True, boxes_predicted=True)
    assert [(r['step'], r['kernels']) for r in det['rows']
            ][:1] == [('train step', 'served (torchvision)')]

    # benchmark.py detection-zoo: one config of mmdet's zoo on a CPU
    zoo = steps['detection_zoo']
    assert (zoo['device'], zoo['size'], zoo['failed']) == ('cpu', 64, [])
    assert [r['config'] for r in zoo['rows']] == [gpu_check.DCNV2]
    assert 'modulated_deform_conv_forward' in zoo['rows'][0]['kernels']

    table = capsys.readouterr().out
    for name in gpu_check.STEPS:
        assert f'| {name} | ok |' in table
    assert '| 6 passed, 0 failed, 0 errors, 0 skipped |' in table
    assert '1 of 1 configs ok at 64 px' in table


def test_the_gpu_benchmark_runs_parse_into_their_settings(load_tool):
    """The CUDA runs (not run without a GPU) are valid benchmark.py train
    options; the compiled one is the GPU row of issue 37: R50, 224 px,
    batch 64, K 65536, bfloat16, channels-last, max-autotune."""
    gpu_check = load_tool('gpu_check')
    bench = gpu_check.benchmark_command('train')
    size = gpu_check.SIZES['cuda']
    runs = {}
    for combo in size['bench_combos']:
        name, argv = gpu_check.bench_argv('cuda', size, combo)
        runs[name] = bench.parse_args(argv)
    assert len(runs) == len(size['bench_combos'])
    compiled = runs['amp_bf16-channels_last_on-compiled']
    assert (compiled.backbone, compiled.img_size, compiled.batch,
            compiled.queue_size, compiled.amp, compiled.channels_last,
            compiled.compile,
            compiled.compile_backend) == ('resnet50', 224, 64, [65536], 'bf16',
                                          'on', 'max-autotune', 'inductor')
    assert runs['amp_off-channels_last_off'].breakdown == 'on'
    assert {
        r.compile
        for n, r in runs.items() if n != 'amp_bf16-channels_last_on-compiled'
    } == {None}
