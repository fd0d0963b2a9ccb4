# Copyright (c) mocoplug contributors. All rights reserved.
"""model-index.yml and the per-method metafiles (mmpretrain's format) list
every pretraining config, and only configs that exist."""
import glob
import os.path as osp
import re

import yaml

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
METHODS = ('mocov1', 'mocov2', 'mocov3')


def load_yaml(path: str) -> dict:
    with open(osp.join(ROOT, path)) as f:
        return yaml.safe_load(f)


def metafiles() -> dict:
    """{metafile path: its content}, as model-index.yml imports them."""
    return {
        path: load_yaml(path)
        for path in load_yaml('model-index.yml')['Import']
    }


def models() -> list:
    return [model for meta in metafiles().values() for model in meta['Models']]


def test_model_index_imports_one_metafile_per_method():
    assert sorted(metafiles()) == [
        f'configs/{method}/metafile.yml' for method in METHODS
    ]


def test_collections_name_paper_and_readme():
    for path, meta in metafiles().items():
        (collection, ) = meta['Collections']
        assert collection['Paper']['URL'].startswith('https://arxiv.org/abs/')
        assert collection['Paper']['Title']
        assert collection['Code']['URL'].startswith(
            'https://github.com/facebookresearch/moco')
        assert collection['README'] == osp.join(osp.dirname(path), 'README.md')
        assert osp.isfile(osp.join(ROOT, collection['README']))
        for model in meta['Models']:
            assert model['In Collection'] == collection['Name'], model['Name']


def test_every_config_path_exists_and_is_named_after_its_file():
    for model in models():
        assert osp.isfile(osp.join(ROOT, model['Config'])), model['Config']
        assert model['Name'] == osp.splitext(osp.basename(model['Config']))[0]
        assert model['Weights'] is None, 'mocoplug ships no weights'


def test_every_pretraining_config_is_in_exactly_one_metafile():
    listed = [model['Config'] for model in models()]
    assert len(listed) == len(set(listed))
    shipped = sorted(
        osp.relpath(path, ROOT) for method in METHODS
        for path in glob.glob(osp.join(ROOT, 'configs', method, '*.py')))
    assert sorted(listed) == shipped


def test_results_are_the_figures_the_configs_state():
    """Each published top-1 of a metafile is the one its config's header
    states ("Published linear top-1 ...: 67.5"), so the two cannot drift."""
    expected = {
        'mocov1_r50_8xb32-steplr-200e_in1k': 60.6,
        'mocov2_r50_8xb32-coslr-200e_in1k': 67.5,
        'mocov2_r50_8xb32-coslr-800e_in1k': 71.1,
        'mocov3_r50_8xb512-amp-coslr-100e_in1k': 68.9,
        'mocov3_vit-small-p16_16xb256-amp-coslr-300e_in1k': 73.2,
        'mocov3_vit-base-p16_16xb256-amp-coslr-300e_in1k': 76.7,
    }
    top1 = {}
    for model in models():
        for result in model['Results'] or []:
            assert set(result) == {'Task', 'Dataset', 'Metrics'}
            if result['Task'] == 'Image Classification':
                assert result['Dataset'] == 'ImageNet-1k'
                top1[model['Name']] = result['Metrics']['Top 1 Accuracy']
                with open(osp.join(ROOT, model['Config'])) as f:
                    header = f.read().split('_base_ =')[0]
                stated = re.search(r'Published linear top-1[^:]*: (\d+\.\d)',
                                   header)
                assert float(stated.group(1)) == top1[model['Name']]
    assert top1 == expected
    (voc, ) = [
        result for model in models() for result in model['Results'] or []
        if result['Task'] == 'Object Detection'
    ]
    assert voc['Metrics']['box AP50'] == 82.4


def test_each_method_readme_names_all_its_configs():
    for model in models():
        folder = osp.dirname(osp.join(ROOT, model['Config']))
        with open(osp.join(folder, 'README.md')) as f:
            assert osp.basename(model['Config']) in f.read(), model['Name']
