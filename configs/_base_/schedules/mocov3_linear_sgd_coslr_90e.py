# MoCo v3's linear-probe schedule (the official main_lincls.py): SGD lr
# 0.1 x batch / 256 (0.4 at 8 x 128 = 1024), momentum 0.9, wd 0, half-cycle
# cosine per epoch over 90 epochs, validated every epoch.
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='SGD', lr=0.4, momentum=0.9, weight_decay=0.))

param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=90, by_epoch=True, begin=0, end=90)
]

train_cfg = dict(by_epoch=True, max_epochs=90, val_interval=1)
val_cfg = dict()
test_cfg = dict()

# the lr is for a total batch of 1024 (8 x 128); --auto-scale-lr rescales it
auto_scale_lr = dict(base_batch_size=1024)
