# ImageNet-1k, 512 images per GPU, MoCo v3's two asymmetric views (crop
# scale 0.2-1; blur prob 1.0 / 0.1, solarize 0 / 0.2): mmpretrain's dataset
# base, with its collate function restated without the `_scope_` tag that
# mmengine 0.10.7 adds and default_collate would receive as an argument
# (see imagenet_bs32_mocov2.py). drop_last=True as the official code's
# loader (main_moco.py): a last batch of one image a GPU would stop training
# in the projector's BatchNorm1d.
_base_ = 'mmpretrain::_base_/datasets/imagenet_bs512_mocov3.py'

train_dataloader = dict(
    drop_last=True, collate_fn=dict(_delete_=True, type='default_collate'))
