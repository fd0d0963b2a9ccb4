# MoCo v2 on tiles of real photographs (PhotoTilesDataset: scikit-image's
# and scikit-learn's bundled photographs, 32 px, no download), the digits
# demo's CPU sizes: 4-layer CNN, batch 64, SplitBN, BN projection neck.
# tools/analysis_tools/photo_rules.py runs it from scratch and continued
# from released weights (model.encoders_from) at several folder sizes; the
# measured rules are in configs/mocov2/README.md, "Your own folder".
_base_ = ['./mocov2_smallconv4-w32_1xb64-splitbn-coslr-15e_digits.py']

data_preprocessor = dict(
    mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])
model = dict(queue=dict(size=1024))

# the digits' views and flips; colour as photographs vary in it
view_pipeline = [
    dict(type='NumpyToPIL', to_rgb=True),
    dict(
        type='torchvision/RandomAffine',
        degrees=20,
        translate=(0.1, 0.1),
        scale=(0.8, 1.2)),
    dict(type='PILToNumpy', to_bgr=True),
    dict(type='RandomFlip', prob=0.5),
    dict(
        type='RandomApply',
        transforms=[
            dict(
                type='ColorJitter',
                brightness=0.4,
                contrast=0.4,
                saturation=0.4,
                hue=0.1)
        ],
        prob=0.8),
    dict(
        type='GaussianBlur',
        magnitude_range=(0.1, 1.0),
        magnitude_std='inf',
        prob=0.5),
]
train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='PhotoTilesDataset',
        split='train',
        num_tiles=1000,
        with_label=False,
        pipeline=[
            dict(type='MultiView', num_views=2, transforms=[view_pipeline]),
            dict(type='PackInputs'),
        ]))
knn_dataset = dict(
    type='PhotoTilesDataset',
    split='memory',
    pipeline=[dict(type='PackInputs')])
knn_dataloader = dict(
    batch_size=256,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=knn_dataset)
custom_hooks = [
    dict(type='MomentumUpdateHook', momentum=0.99),
    dict(
        type='KNNMonitorHook',
        memory_dataloader=knn_dataloader,
        query_dataloader=dict(
            knn_dataloader, dataset=dict(knn_dataset, split='test')),
        interval=5,
        topk=(20, ),
        temperature=0.07),
]
