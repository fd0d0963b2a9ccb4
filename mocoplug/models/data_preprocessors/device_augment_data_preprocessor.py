# Copyright (c) mocoplug contributors. All rights reserved.
import hashlib
from typing import List, Optional, Sequence, Tuple, Union

import torch
from mmengine.dist import broadcast_object_list, get_dist_info
from mmengine.logging import print_log
from mmpretrain.models.utils import SelfSupDataPreprocessor

from mocoplug.datasets.transforms.view_pipeline_split import (repeat_per_view,
                                                              transform_name)
from mocoplug.registry import MODELS
from ..utils.batch_augments import PhotometricViewAugment, decode_views
from ..utils.batch_augments.decode_resized_crop import to_device

STATE_KEY = 'generator_state'
_SEED_MIX = 0x5DEECE66D  # the stream differs from torch's global one


def _shared_seed() -> int:
    """A seed from the run's seed (rank 0's in a distributed run)."""
    seed = [(torch.initial_seed() ^ _SEED_MIX) % 2**63]
    if get_dist_info()[1] > 1:
        broadcast_object_list(seed, src=0)
    return int(seed[0])


def _seed_from_state(state: torch.Tensor) -> int:
    digest = hashlib.sha256(state.cpu().numpy().tobytes()).digest()
    return int.from_bytes(digest[:8], 'little') >> 1


@MODELS.register_module()
class DeviceAugmentDataPreprocessor(SelfSupDataPreprocessor):
    """``SelfSupDataPreprocessor`` that, in training, applies the photometric
    steps of the view pipelines (MoCo v2/v3) batched on the model's device,
    to ``GeometricMultiView`` views or ``CropBoxMultiView`` crops decoded
    there; parameters drawn per sample of the global batch from a device
    generator whose state is the buffer ``generator_state``.

    Args:
        transforms (list[list[dict]]): The view pipelines, as ``MultiView``.
        num_views (int | list[int]): Views per pipeline, as ``MultiView``.
        seed (int, optional): Generator seed; None derives it from the run's.
        **kwargs: ``SelfSupDataPreprocessor``'s arguments.
    """

    variable_size_state = (STATE_KEY, )  # its size depends on the device

    def __init__(self,
                 transforms: List[List[dict]],
                 num_views: Union[int, List[int]],
                 seed: Optional[int] = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.view_augments = repeat_per_view(
            'DeviceAugmentDataPreprocessor',
            [PhotometricViewAugment(p) for p in transforms], num_views)
        self.seed = _shared_seed() if seed is None else int(seed)
        self.register_buffer(STATE_KEY, torch.zeros(0, dtype=torch.uint8))
        self._generator = self._loaded_state = None
        self._has_drawn = False

    def _generator_on(self, device: torch.device) -> torch.Generator:
        """The generator, created on (or moved to) ``device`` when needed."""
        device = torch.device(device)
        if device.type == 'cuda' and device.index is None:
            device = torch.device('cuda', torch.cuda.current_device())
        old = self._generator
        if old is not None and old.device == device:
            return old
        generator = torch.Generator(device=device)
        state = self._loaded_state
        if state is None and old is not None and self._has_drawn:
            state = old.get_state()
        if state is None:
            generator.manual_seed(self.seed)
        else:
            try:
                generator.set_state(state.cpu())
            except (RuntimeError, ValueError):
                generator.manual_seed(_seed_from_state(state))
                print_log(
                    'DeviceAugmentDataPreprocessor: the saved generator state '
                    f'is not a {device.type} one; re-seeded from it',
                    logger='current',
                    level=30)
        self._generator, self._loaded_state = generator, None
        return generator

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + STATE_KEY] = self._generator_on(
            self.device).get_state()

    def _load_from_state_dict(self, state_dict, prefix, *args):
        error_msgs = args[-1]  # (local_metadata, strict, ..., error_msgs)
        key = prefix + STATE_KEY
        state = state_dict.get(key)
        if state is not None and state.dtype != torch.uint8:
            error_msgs.append(f'{key}: a uint8 generator state expected, '
                              f'got {state.dtype}')
        elif state is not None and state.numel():
            setattr(
                self, STATE_KEY,
                torch.empty_like(state, device=self.generator_state.device))
            self._loaded_state = state.detach().cpu().clone()
            self._generator = None
        super()._load_from_state_dict(state_dict, prefix, *args)

    def _crop_geometry(self) -> Tuple[List[Tuple[int, int]], List[str]]:
        """(height, width) and interpolation of each view's crop."""
        sizes, modes = [], []
        for index, augment in enumerate(self.view_augments):
            crop = next((t for t in augment.geometric
                         if transform_name(t) == 'RandomResizedCrop'), None)
            if crop is None:
                raise ValueError(f'DeviceAugmentDataPreprocessor: view '
                                 f'{index} needs a RandomResizedCrop')
            scale = crop['scale']
            scale = (scale, scale) if isinstance(scale, int) else scale
            mode = crop.get('interpolation', 'bilinear')
            if mode not in ('bilinear', 'bicubic'):
                raise ValueError('DeviceAugmentDataPreprocessor: '
                                 "interpolation 'bilinear' or 'bicubic', "
                                 f'not {mode!r}')
            sizes.append((int(scale[1]), int(scale[0])))  # (height, width)
            modes.append(mode)
        return sizes, modes

    def _views(self, inputs) -> Sequence[torch.Tensor]:
        if isinstance(inputs, dict) and 'encoded' in inputs:
            sizes, modes = self._crop_geometry()
            return decode_views(inputs['encoded'], inputs['exif_orientation'],
                                inputs['crop_boxes'], inputs['flips'], sizes,
                                modes, self.device)
        if isinstance(inputs, (list, tuple)) and all(
                torch.is_tensor(v) and v.dim() == 4 for v in inputs):
            return [to_device(view, self.device) for view in inputs]
        raise TypeError(
            'DeviceAugmentDataPreprocessor: expected a list of B x 3 x H x W '
            'views (GeometricMultiView) or encoded images '
            f'(CropBoxMultiView), got {type(inputs).__name__}')

    def forward(self, data: dict, training: bool = False) -> dict:
        """Training: augment, normalise in float32, autocast off; else base."""
        if not training:
            return super().forward(data, training)
        with torch.autocast(torch.device(self.device).type, enabled=False):
            return self._augment(data)

    def _augment(self, data: dict) -> dict:
        views = self._views(data['inputs'])
        if len(views) != len(self.view_augments):
            raise ValueError(
                f'DeviceAugmentDataPreprocessor: {len(views)} views in the '
                f'batch, {len(self.view_augments)} configured')
        generator = self._generator_on(self.device)
        rank, world_size = get_dist_info()
        outputs = []
        for view, augment in zip(views, self.view_augments):
            num = view.shape[0]
            params = augment.sample(num * world_size, generator, view.device)
            if world_size > 1:  # this rank's slice of the global batch
                params = [{
                    k: v[rank * num:(rank + 1) * num]
                    for k, v in step.items()
                } for step in params]
            images = augment(view, params)
            if self._channel_conversion:
                images = images.flip(1)  # BGR <-> RGB, no index tensor
            if self._enable_normalize:
                images = (images - self.mean) / self.std
            outputs.append(images)
        self._has_drawn = True
        return dict(inputs=outputs, data_samples=data.get('data_samples'))
