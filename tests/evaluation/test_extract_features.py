# Copyright (c) mocoplug contributors. All rights reserved.
"""Feature extraction for kNN: each rank's shard holds each image once, and
gathering sends the features themselves, not the batches they came from."""
import os

import torch
from mmengine.model import BaseDataPreprocessor, BaseModel
from mmengine.runner import Runner

from mocoplug.datasets import DigitsDataset
from mocoplug.evaluation import (extract_feature_shard, extract_features,
                                 gather_feature_shards,
                                 sharded_weighted_knn_accuracy,
                                 weighted_knn_accuracy)
from ..gloo import (count_collective_bytes, free_port, join_gloo_group,
                    run_two_ranks)

IMAGES, BATCH, DIM = 21, 4, 3 * 8 * 8  # 21 images: the sampler pads one


class FlattenImages(BaseModel):
    """Features = the 8 x 8 x 3 pixels: known values, no weights."""

    def extract_feat(self, inputs):
        return inputs.flatten(1)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        return self.extract_feat(inputs)


class SamplesToMeta(BaseDataPreprocessor):
    """Moves the samples where their values cannot be read (the meta
    device), as a stand-in for a GPU where every read waits."""

    def forward(self, data, training=False):
        data = super().forward(data, training)
        return dict(
            data, data_samples=[s.to('meta') for s in data['data_samples']])


def digits_loader(shuffle=False, split='test', images=IMAGES):
    return Runner.build_dataloader(
        dict(
            batch_size=BATCH,
            num_workers=0,
            sampler=dict(type='DefaultSampler', shuffle=shuffle),
            collate_fn=dict(type='default_collate'),
            dataset=DigitsDataset(
                split=split,
                img_size=8,
                indices=images,
                pipeline=[dict(type='PackInputs')])),
        seed=0)


def expected_features(split='test', images=IMAGES):
    dataset = digits_loader(split=split, images=images).dataset
    feats = torch.stack([
        torch.from_numpy(dataset[i]['inputs'].numpy()).flatten().float()
        for i in range(images)
    ])
    labels = torch.tensor(
        [int(dataset[i]['data_samples'].gt_label) for i in range(images)])
    return feats, labels


def test_one_process_gives_every_image_in_dataset_order():
    feats, labels = expected_features()
    got, got_labels = extract_features(FlattenImages(), digits_loader())
    assert torch.equal(got, feats) and torch.equal(got_labels, labels)
    # a shuffled sampler: the shard is put back in dataset order
    shard = extract_feature_shard(FlattenImages(), digits_loader(True))
    assert shard.ids.tolist() == list(range(IMAGES))
    assert torch.equal(shard.feats, feats)


def test_labels_are_read_before_the_preprocessor_moves_the_samples():
    model = FlattenImages(data_preprocessor=SamplesToMeta())
    feats, labels = expected_features()
    got, got_labels = extract_features(model, digits_loader())
    assert torch.equal(got, feats) and torch.equal(got_labels, labels)


def _worker(rank, port, out_dir, images=IMAGES):
    import torch.distributed as dist
    join_gloo_group(rank, port)
    # (built first: the datasets pickle their entries)
    loader = digits_loader(images=images)
    queries = digits_loader(split='train', images=9)
    record = dict(received=0, objects=0)
    count_collective_bytes(record)
    shard = extract_feature_shard(FlattenImages(), loader)
    gathered = gather_feature_shards(shard)
    record = dict(record)
    # what KNNMonitorHook does with the shards of both sets
    knn = sharded_weighted_knn_accuracy(
        extract_feature_shard(FlattenImages(), queries), shard, 10, (1, 5))
    out = dict(shard=shard._asdict(), gathered=gathered._asdict(), knn=knn)
    torch.save(dict(out, record=record), os.path.join(out_dir, f'{rank}.pth'))
    dist.destroy_process_group()


def test_two_ranks_shard_without_padding_and_gather_only_the_features(
        tmp_path):
    run_two_ranks(_worker, free_port(), str(tmp_path))
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
    # the kNN of the two ranks' shards is the kNN of the whole sets (9
    # queries, 21 memory images): the same neighbours, since the k-th and
    # (k + 1)-th similarities of these pixel vectors differ by 2.5e-3 or
    # more for k = 1, 5 (float64), far above float32 rounding (1e-6)
    queries, query_labels = expected_features('train', 9)
    expected = weighted_knn_accuracy(queries, query_labels, feats, labels, 10,
                                     (1, 5))
    assert outs[0]['knn'] == outs[1]['knn'] == expected


def test_a_rank_without_images_gathers_and_votes(tmp_path):
    """One image, two ranks: rank 1 gets only the sampler's padding, so
    its shard is empty, with the dtypes of rank 0's (a float32 label
    tensor there would not match the int64 ones in the gather)."""
    run_two_ranks(_worker, free_port(), str(tmp_path), 1)
    feats, labels = expected_features(images=1)
    outs = [torch.load(tmp_path / f'{r}.pth') for r in range(2)]
    assert outs[1]['shard']['ids'].numel() == 0
    for out in outs:
        assert out['shard']['labels'].dtype == torch.long
    assert torch.equal(outs[0]['gathered']['feats'], feats)
    assert torch.equal(outs[0]['gathered']['labels'], labels)
    queries, query_labels = expected_features('train', 9)
    expected = weighted_knn_accuracy(queries, query_labels, feats, labels, 10,
                                     (1, 5))
    assert outs[0]['knn'] == outs[1]['knn'] == expected
