# Copyright (c) mocoplug contributors. All rights reserved.
from .extract_features import (FeatureShard, check_one_pass,
                               extract_feature_shard, extract_features,
                               gather_feature_shards, pool_feature)
from .knn_neighbours import (Neighbours, merge_neighbours, nearest_neighbours,
                             weighted_votes)
from .label_efficiency import linear_probe_accuracy, stratified_label_subsets
from .representation_health import (alignment, embedding_std,
                                    relative_parameter_distance, uniformity)
from .sharded_weighted_knn import sharded_weighted_knn_accuracy
from .weighted_knn import weighted_knn_accuracy, weighted_knn_scores

__all__ = [
    'extract_features', 'extract_feature_shard', 'gather_feature_shards',
    'FeatureShard', 'check_one_pass', 'pool_feature', 'weighted_knn_scores',
    'weighted_knn_accuracy', 'sharded_weighted_knn_accuracy', 'Neighbours',
    'nearest_neighbours', 'merge_neighbours', 'weighted_votes',
    'embedding_std', 'alignment', 'uniformity', 'relative_parameter_distance',
    'stratified_label_subsets', 'linear_probe_accuracy'
]
