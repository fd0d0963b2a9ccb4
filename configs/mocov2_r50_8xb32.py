# The short name: MoCo v2, ResNet-50, 8 GPUs x 32, 200 epochs on ImageNet-1k.
#   tools/dist_train.sh configs/mocov2_r50_8xb32.py 8
_base_ = './mocov2/mocov2_r50_8xb32-coslr-200e_in1k.py'
