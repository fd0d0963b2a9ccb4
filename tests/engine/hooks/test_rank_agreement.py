# Copyright (c) mocoplug contributors. All rights reserved.
"""Every decision that stops or changes a run is the same on every rank
(docs/guarantees.md): 2 gloo ranks, only one of which sees the trigger."""
import json
import math
import os.path as osp
from types import SimpleNamespace

import pytest
import torch.distributed as dist
from mmengine.logging import MessageHub, MMLogger

from mocoplug.engine.hooks import NonFiniteLossHook, RepresentationHealthHook
from mocoplug.engine.hooks.non_finite_loss_hook import NonFiniteLossError
from ...gloo import free_port, join_gloo_group, run_two_ranks
from ...models.algorithms.test_mocov3 import samples
from .test_representation_health_hook import (fake_runner, loader_of_4,
                                              tiny_moco)


def _decide(rank: int, port: int, out_dir: str) -> None:
    join_gloo_group(rank, port)
    decided = {}
    # a non-finite loss on rank 1 only: both ranks stop at this iteration
    runner = SimpleNamespace(
        iter=6,
        epoch=0,
        hooks=[],
        train_loop=None,
        train_dataloader=range(10),
        message_hub=MessageHub.get_instance(f'agree-{rank}'))
    try:
        NonFiniteLossHook().after_train_iter(
            runner, 6, outputs=dict(loss=math.nan if rank else 1.0))
        decided['non_finite'] = 'went on'
    except NonFiniteLossError as error:
        decided['non_finite'] = str(error).split(' at iteration')[0].split(
            ': ', 1)[1]
    # the not-learning check: rank 0's loss at chance, rank 1's far below
    model = tiny_moco(queue_size=6)
    runner = fake_runner(model)
    runner.message_hub = MessageHub.get_instance(f'agree-loss-{rank}')
    runner.train_dataloader = loader_of_4()
    hook = RepresentationHealthHook(interval=1)
    hook.before_train(runner)
    hook.before_train_iter(runner, batch_idx=0)
    model.loss(list(torch_views(rank)), samples(range(4)))
    hook.after_train_iter(runner, batch_idx=0)
    chance = math.log(7)
    for _ in range(50):
        runner.message_hub.update_scalar('train/loss', chance - 2.0 * rank)
    hook.check_learning(runner)
    decided['learning'] = hook.not_learning
    decided['metrics'] = hook.last_metrics
    with open(osp.join(out_dir, f'{rank}.json'), 'w') as f:
        json.dump(decided, f)
    dist.destroy_process_group()


def torch_views(rank):
    import torch
    torch.manual_seed(rank)  # each rank its own batch
    return torch.randn(2, 4, 3, 32, 32)


def test_one_rank_triggers_every_rank_decides_alike(tmp_path):
    MMLogger.get_instance('mmengine')
    run_two_ranks(_decide, free_port(), str(tmp_path))
    ranks = [json.loads((tmp_path / f'{r}.json').read_text()) for r in (0, 1)]
    # both stopped; rank 0 names the other rank's loss
    assert ranks[1]['non_finite'] == 'training diverged: loss=nan'
    assert ranks[0]['non_finite'] == ('training diverged: a non-finite '
                                      'loss on another rank')
    # one decision from the mean loss over ranks: ln 7 - 1, learning
    for rank in ranks:
        assert rank['learning'] == ranks[0]['learning']
        assert rank['metrics'] == ranks[0]['metrics']
    assert ranks[0]['learning']['loss'] == pytest.approx(math.log(7) - 1)
