# Copyright (c) mocoplug contributors. All rights reserved.
"""Feature extraction for kNN: each rank's shard holds each image once, and
gathering sends the features themselves, not the batches they came from."""
import os

import torch
import torch.multiprocessing as mp
from mmengine.model import BaseModel
from mmengine.runner import Runner

from mocoplug.datasets import DigitsDataset
from mocoplug.evaluation import (extract_feature_shard, extract_features,
                                 gather_feature_shards)
from ..gloo import count_collective_bytes, free_port, join_gloo_group

IMAGES, BATCH, DIM = 21, 4, 3 * 8 * 8  # 21 images: the sampler pads one


class FlattenImages(BaseModel):
    """Features = the 8 x 8 x 3 pixels: known values, no weights."""

    def extract_feat(self, inputs):
        return inputs.flatten(1)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        return self.extract_feat(inputs)


def digits_loader(shuffle=False):
    return Runner.build_dataloader(
        dict(
            batch_size=BATCH,
            num_workers=0,
            sampler=dict(type='DefaultSampler', shuffle=shuffle),
            collate_fn=dict(type='default_collate'),
            dataset=DigitsDataset(
                split='test',
                img_size=8,
                indices=IMAGES,
                pipeline=[dict(type='PackInputs')])),
        seed=0)


def expected_features():
    dataset = digits_loader().dataset
    feats = torch.stack([
        torch.from_numpy(dataset[i]['inputs'].numpy()).flatten().float()
        for i in range(IMAGES)
    ])
    labels = torch.tensor(
        [int(dataset[i]['data_samples'].gt_label) for i in range(IMAGES)])
    return feats, labels


def test_one_process_gives_every_image_in_dataset_order():
    feats, labels = expected_features()
    got, got_labels = extract_features(FlattenImages(), digits_loader())
    assert torch.equal(got, feats) and torch.equal(got_labels, labels)
    # a shuffled sampler: the shard is put back in dataset order
    shard = extract_feature_shard(FlattenImages(), digits_loader(True))
    assert shard.ids.tolist() == list(range(IMAGES))
    assert torch.equal(shard.feats, feats)


def _worker(rank, port, out_dir):
    import torch.distributed as dist
    join_gloo_group(rank, port)
    loader = digits_loader()  # (the dataset pickles its entries)
    record = dict(received=0, objects=0)
    count_collective_bytes(record)
    shard = extract_feature_shard(FlattenImages(), loader)
    gathered = gather_feature_shards(shard)
    out = dict(shard=shard._asdict(), gathered=gathered._asdict())
    torch.save(dict(out, record=record), os.path.join(out_dir, f'{rank}.pth'))
    dist.destroy_process_group()


def test_two_ranks_shard_without_padding_and_gather_only_the_features(
        tmp_path):
    mp.spawn(_worker, args=(free_port(), str(tmp_path)), nprocs=2)
    feats, labels = expected_features()
    outs = [torch.load(tmp_path / f'{r}.pth') for r in range(2)]
    # DefaultSampler: rank 0 gets 0, 2, ..., 20, rank 1 gets 1, ..., 19
    # and the padding (image 0 again), which the shard drops
    for rank, out in enumerate(outs):
        ids = list(range(rank, IMAGES, 2))
        assert out['shard']['ids'].tolist() == ids
        assert torch.equal(out['shard']['feats'], feats[ids])
        assert torch.equal(out['shard']['labels'], labels[ids])
    assert torch.equal(outs[0]['gathered']['feats'], feats)
    assert torch.equal(outs[0]['gathered']['labels'], labels)
    assert outs[1]['gathered']['feats'].numel() == 0
    # Rank 0 receives 2 x 11 rows of features (float32), labels and ids
    # (int64), and 2 x 2 int64 counts. Gathering the rows one by one as
    # views of their batch would pickle each batch once per row (BATCH x
    # the bytes, measured 128x for batches of 128).
    bound = 2 * 11 * (DIM * 4 + 8 + 8) + 2 * 2 * 8
    assert outs[0]['record']['received'] <= bound
    assert outs[0]['record']['objects'] == 0
