# Weighted kNN evaluation of a pretrained ResNet-50 on ImageNet-1k, the
# protocol of "Unsupervised Feature Learning via Non-Parametric Instance
# Discrimination" (Wu et al., CVPR 2018): frozen backbone, global-average-
# pooled L2-normalised features, the k nearest training images vote with
# weight exp(cos / 0.07); top-1 for k = 20 and 200. No training.
#   python tools/analysis_tools/knn_eval.py \
#       configs/benchmarks/knn_r50_in1k.py \
#       work_dirs/mocov2_r50_8xb32/epoch_200.pth
#   torchrun --nproc_per_node 8 tools/analysis_tools/knn_eval.py CONFIG CKPT \
#       --launcher pytorch
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs32_pil_resize.py',
    '../_base_/default_runtime.py',
]

# The MoCo checkpoint; tools/analysis_tools/knn_eval.py fills it from its
# CHECKPOINT argument (query encoder only, via mocoplug's 'Pretrained'
# initialiser).
pretrained = None

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='ResNet',
        depth=50,
        out_indices=(3, ),
        init_cfg=dict(
            type='Pretrained',
            _scope_='mocoplug',  # mocoplug's: all tensors or an error
            checkpoint=pretrained,
            prefix='backbone.')),
    neck=None,
    head=None)

# memory = the training images with the test pipeline; queries = val
knn_memory_dataloader = dict(
    batch_size=128,
    num_workers=8,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(
        type='ImageNet',
        data_root='data/imagenet',
        split='train',
        pipeline={{_base_.test_pipeline}}))
knn_query_dataloader = dict(
    knn_memory_dataloader,
    dataset=dict(knn_memory_dataloader['dataset'], split='val'))
knn = dict(topk=(20, 200), temperature=0.07)
