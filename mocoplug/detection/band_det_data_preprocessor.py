# Copyright (c) mocoplug contributors. All rights reserved.
from mmdet.models.data_preprocessors import DetDataPreprocessor
from mmdet.registry import MODELS

from mocoplug.models.data_preprocessors.band_data_preprocessor import \
    BandStatistics


@MODELS.register_module()
class BandDetDataPreprocessor(BandStatistics, DetDataPreprocessor):
    """mmdet's ``DetDataPreprocessor`` for images of any number of bands and
    any bit depth: one ``mean`` and ``std`` per band in the files' value
    range (:class:`BandStatistics`), the detector on the bands and values
    the MoCo backbone was pretrained on (the multiband config)."""
