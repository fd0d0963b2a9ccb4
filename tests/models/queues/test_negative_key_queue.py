# Copyright (c) mocoplug contributors. All rights reserved.
import os

import pytest
import torch

from mocoplug.models import NegativeKeyQueue
from mocoplug.models.utils.fused_info_nce import fused_info_nce
from ...gloo import free_port, join_gloo_group, run_two_ranks


def reference_queue(queue: NegativeKeyQueue, batches):
    """What the queue must hold: the initial keys, then each key written one
    at a time into a ring of `size` slots."""
    slots = [row.clone() for row in queue.keys]
    ptr = 0
    for batch in batches:
        for key in batch:
            slots[ptr] = key
            ptr = (ptr + 1) % queue.size
    return torch.stack(slots), ptr


def test_init_is_normalised_and_persistent(on_device):
    queue = NegativeKeyQueue(size=10, dim=4, exclude_same_instance=True)
    assert queue.keys.shape == (10, 4)
    assert torch.allclose(queue.keys.norm(dim=1), torch.ones(10))
    assert int(queue.ptr) == 0
    assert set(queue.state_dict()) == {'keys', 'ptr', 'ids'}
    assert (queue.ids == -1).all()


@pytest.mark.parametrize('batch_sizes',
                         [[3, 4], [5, 5, 5], [7], [2, 9, 1], [12, 3]])
def test_wrap_around_and_batches_larger_than_the_queue(batch_sizes, on_device):
    torch.manual_seed(0)
    queue = NegativeKeyQueue(size=5, dim=3)
    batches = [torch.randn(n, 3) for n in batch_sizes]
    expected, expected_ptr = reference_queue(queue, batches)
    for batch in batches:
        queue.enqueue(batch)
    assert torch.equal(queue(), expected)
    assert int(queue.ptr) == expected_ptr


def test_hand_written_wrap_around(on_device):
    queue = NegativeKeyQueue(size=4, dim=1)
    queue.enqueue(torch.tensor([[1.], [2.], [3.]]))
    queue.enqueue(torch.tensor([[4.], [5.]]))  # 4 -> slot 3, 5 -> slot 0
    assert queue().flatten().tolist() == [5., 2., 3., 4.]
    assert int(queue.ptr) == 1
    queue.enqueue(torch.arange(10., 16.).view(6, 1))  # keeps 12..15
    # 10 -> 1, 11 -> 2, 12 -> 3, 13 -> 0, 14 -> 1, 15 -> 2
    assert queue().flatten().tolist() == [13., 14., 15., 12.]
    assert int(queue.ptr) == 3


def test_reading_returns_the_buffer_itself():
    queue = NegativeKeyQueue(size=4, dim=2)
    assert queue() is queue.keys  # no copy of K x C per step


def test_keys_are_written_at_the_next_read_after_the_backward(on_device):
    """No copy of the queue: keys enqueued after a read wait for the next
    read, so the backward through the first one sees the old keys."""
    torch.manual_seed(0)
    queue = NegativeKeyQueue(size=5, dim=3)
    before = queue.keys.clone()
    query = torch.randn(2, 3, requires_grad=True)
    weight = torch.randn(2, 5)
    neg = query @ queue().t()
    assert torch.equal(neg, query.detach() @ before.t())
    new = torch.randn(3, 3)
    expected, expected_ptr = reference_queue(queue, [new])
    queue.enqueue(new)
    assert torch.equal(queue.keys, before) and int(queue.ptr) == 0
    (neg * weight).sum().backward()
    assert torch.equal(query.grad, weight @ before)  # the old keys
    assert torch.equal(queue.keys, before)  # written by the next read only
    assert torch.equal(queue(), expected)
    assert int(queue.ptr) == expected_ptr


def test_fused_loss_backward_uses_the_keys_it_read(on_device):
    """The fused loss reads the buffer (no logits node of the queue's own):
    the gradient of the query uses the keys read, not the enqueued ones."""
    torch.manual_seed(0)
    queue = NegativeKeyQueue(size=5, dim=3)
    before = queue.keys.clone()
    leaf = torch.randn(2, 3, requires_grad=True)
    query = torch.nn.functional.normalize(leaf, dim=1)  # a non-leaf
    key = torch.nn.functional.normalize(torch.randn(2, 3), dim=1)
    loss, _ = fused_info_nce(query, key, queue(), 0.2)
    new = torch.randn(3, 3)
    expected, expected_ptr = reference_queue(queue, [new])
    queue.enqueue(new)
    loss.backward()
    assert torch.equal(queue(), expected)
    assert int(queue.ptr) == expected_ptr
    ref_leaf = leaf.detach().clone().requires_grad_()
    fused_info_nce(
        torch.nn.functional.normalize(ref_leaf, dim=1), key, before,
        0.2)[0].backward()
    assert torch.equal(leaf.grad, ref_leaf.grad)  # the old keys


def test_two_reads_one_backward(on_device):
    """MoCo v3 with a queue: two terms read the queue, one backward."""
    torch.manual_seed(0)
    queue = NegativeKeyQueue(size=6, dim=2)
    before = queue.keys.clone()
    q1, q2 = (torch.randn(2, 2, requires_grad=True) for _ in range(2))
    loss = (q1 @ queue().t()).sum() + 2 * (q2 @ queue().t()).sum()
    new = torch.randn(4, 2)
    expected, _ = reference_queue(queue, [new])
    queue.enqueue(new)
    loss.backward()
    assert torch.equal(q1.grad, torch.ones(2, 6) @ before)
    assert torch.equal(q2.grad, torch.full((2, 6), 2.) @ before)
    assert torch.equal(queue(), expected)


def test_a_graph_older_than_a_write_cannot_backprop_wrongly(on_device):
    """A loss computed without a backward: its keys are negatives of the
    next step all the same, and the stale graph cannot backprop wrongly."""
    torch.manual_seed(0)
    queue = NegativeKeyQueue(size=5, dim=3)
    query = torch.randn(2, 3, requires_grad=True)
    stale = query @ queue().t()
    batches = [torch.randn(2, 3), torch.randn(2, 3)]
    expected, expected_ptr = reference_queue(queue, batches)
    queue.enqueue(batches[0])
    neg = query @ queue().t()  # writes batch 0 first
    queue.enqueue(batches[1])
    neg.sum().backward()  # the current graph
    assert torch.equal(queue(), expected)
    assert int(queue.ptr) == expected_ptr
    with pytest.raises(RuntimeError, match='inplace'):
        stale.sum().backward()


def test_state_dict_holds_the_pending_keys_without_writing_them(on_device):
    """A checkpoint taken between a loss and its backward carries the new
    keys (and ids); the live buffer stays intact for the backward."""
    torch.manual_seed(0)
    queue = NegativeKeyQueue(size=5, dim=3, exclude_same_instance=True)
    before = queue.keys.clone()
    query = torch.randn(2, 3, requires_grad=True)
    neg = query @ queue().t()
    new = torch.randn(3, 3)
    expected, expected_ptr = reference_queue(queue, [new])
    queue.enqueue(new, ids=torch.tensor([4, 5, 6]))
    state = queue.state_dict()
    assert set(state) == {'keys', 'ptr', 'ids'}
    assert torch.equal(state['keys'], expected)
    assert int(state['ptr']) == expected_ptr
    assert state['ids'].tolist() == [4, 5, 6, -1, -1]
    assert torch.equal(queue.keys, before)  # not written yet
    neg.sum().backward()
    assert torch.equal(query.grad, torch.ones(2, 5) @ before)
    queue()
    for name, value in queue.state_dict().items():
        assert torch.equal(value, state[name]), name
    # loads into a fresh queue
    fresh = NegativeKeyQueue(size=5, dim=3, exclude_same_instance=True)
    fresh.load_state_dict(state)
    assert torch.equal(fresh(), expected)
    assert fresh.ids.tolist() == [4, 5, 6, -1, -1]


def test_loading_drops_pending_keys(on_device):
    torch.manual_seed(0)
    source = NegativeKeyQueue(size=4, dim=2)
    state = {k: v.clone() for k, v in source.state_dict().items()}
    queue = NegativeKeyQueue(size=4, dim=2)
    queue.enqueue(torch.ones(2, 2))  # pending
    queue.load_state_dict(state)
    assert torch.equal(queue(), state['keys'])
    assert int(queue.ptr) == 0


def test_a_subclass_forward_reads_the_written_keys(on_device):
    """The extension point of the README: a queue that overrides forward
    (here: the newest two keys) sees every enqueued key."""

    class Newest(NegativeKeyQueue):

        def forward(self):
            return self.keys[(self.ptr - 1 - torch.arange(2)) % self.size]

    queue = Newest(size=4, dim=1)
    queue.enqueue(torch.tensor([[1.], [2.], [3.]]))
    assert queue().flatten().tolist() == [3., 2.]


def test_module_conversion_writes_the_pending_keys_first(on_device):
    queue = NegativeKeyQueue(size=4, dim=2)
    queue.enqueue(torch.ones(2, 2))
    queue.double()
    assert queue.keys.dtype == torch.float64
    assert torch.equal(queue.keys[:2], torch.ones(2, 2, dtype=torch.float64))
    assert int(queue.ptr) == 2


def test_half_precision_keys_are_stored_in_float32(on_device):
    queue = NegativeKeyQueue(size=4, dim=2)
    queue.enqueue(torch.ones(2, 2, dtype=torch.float16))
    assert queue().dtype == torch.float32
    assert torch.equal(queue.keys[:2], torch.ones(2, 2))


def test_the_queue_follows_the_model_dtype_but_never_below_float32():
    torch.manual_seed(0)
    queue = NegativeKeyQueue(size=8, dim=4)
    initial = queue.keys.clone()
    queue.double()  # a float64 model: a float64 queue
    assert queue().dtype == torch.float64
    queue.enqueue(torch.full((2, 4), 1 / 3, dtype=torch.float64))
    assert torch.equal(queue()[:2],
                       torch.full((2, 4), 1 / 3, dtype=torch.float64))
    # float32 keys are widened, not the queue narrowed
    queue.enqueue(torch.ones(1, 4))
    assert queue().dtype == torch.float64
    # .half() / .bfloat16() keep it float32, converted from the value it
    # had (not rounded through 16 bits)
    fresh = NegativeKeyQueue(size=8, dim=4)
    fresh.keys.copy_(initial)
    for low in (torch.float16, torch.bfloat16):
        converted = fresh.to(low)
        assert converted is fresh
        assert fresh.keys.dtype == torch.float32
        assert torch.equal(fresh.keys, initial)
    assert queue.float().keys.dtype == torch.float32


def test_same_instance_mask(on_device):
    queue = NegativeKeyQueue(size=4, dim=2, exclude_same_instance=True)
    queue.enqueue(torch.randn(3, 2), ids=torch.tensor([7, 8, 7]))
    mask = queue.same_instance_mask(torch.tensor([7, 9]))
    assert mask.tolist() == [[True, False, True, False],
                             [False, False, False, False]]
    assert NegativeKeyQueue(
        size=4, dim=2).same_instance_mask(torch.tensor([1])) is None


def test_bad_input_names_the_fix():
    queue = NegativeKeyQueue(size=4, dim=2, exclude_same_instance=True)
    with pytest.raises(ValueError, match="out_channels"):
        queue.enqueue(torch.randn(3, 5), ids=torch.arange(3))
    with pytest.raises(ValueError, match='sample_idx'):
        queue.enqueue(torch.randn(3, 2))
    with pytest.raises(ValueError, match='size'):
        NegativeKeyQueue(size=0, dim=2)


def _gather_worker(rank: int, world_size: int, port: int, out_dir: str):
    import torch.distributed as dist
    join_gloo_group(rank, port, world_size)
    torch.manual_seed(0)  # same initial queue on both ranks
    queue = NegativeKeyQueue(size=8, dim=3, exclude_same_instance=True)
    gen = torch.Generator().manual_seed(100 + rank)  # different keys
    for step in range(3):
        keys = torch.randn(3, 3, generator=gen)
        queue.enqueue(keys, ids=torch.arange(3) + 10 * rank + 100 * step)
    torch.save(dict(queue.state_dict()), os.path.join(out_dir, f'{rank}.pth'))
    dist.destroy_process_group()


def test_gather_leaves_identical_queues_on_two_ranks(tmp_path):
    run_two_ranks(_gather_worker, 2, free_port(), str(tmp_path))
    q0 = torch.load(tmp_path / '0.pth')
    q1 = torch.load(tmp_path / '1.pth')
    for name in ('keys', 'ptr', 'ids'):
        assert torch.equal(q0[name], q1[name])
    # 3 steps x 2 ranks x 3 keys = 18 writes into 8 slots: ptr = 18 % 8
    assert int(q0['ptr']) == 2
    # the rank-0 keys of a step precede the rank-1 keys (gather order)
    torch.manual_seed(0)
    reference = NegativeKeyQueue(size=8, dim=3)
    gens = [torch.Generator().manual_seed(100 + r) for r in range(2)]
    batches = []
    for _ in range(3):
        batches.append(
            torch.cat([torch.randn(3, 3, generator=g) for g in gens]))
    expected, _ = reference_queue(reference, batches)
    assert torch.equal(q0['keys'], expected)
    # writes in order: ids 0,1,2 (rank 0), 10,11,12 (rank 1), 100, ...;
    # write w lands in slot w % 8, so slots 0..7 hold writes 16,17,10..15
    assert q0['ids'].tolist() == [211, 212, 111, 112, 200, 201, 202, 210]
