# Copyright (c) mocoplug contributors. All rights reserved.
"""Every path, command and test that README.md and docs/ name is real.

Each test collects every problem before failing and lists them all, each
broken reference once with every ``FILE:LINE`` that uses it, so that a
moved file shows every page to fix at once.
"""
import glob
import itertools
import os
import re

import pytest
from mmengine.config import Config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(['README.md'] + [
    os.path.relpath(path, ROOT) for path in glob.glob(
        os.path.join(ROOT, 'docs', '**', '*.md'), recursive=True)
])
# Paths the pages name that are not in the repository on purpose: the
# README's registry example writes this config (tests/test_readme.py runs it)
EXAMPLE_FILES = {'configs/my_mocov2_r18.py'}

PATH = re.compile(r'(?<![\w/.$~-])'
                  r'((?:configs|tools|tests|docs|mocoplug|requirements|\.ci)'
                  r'/[\w./{},*-]*[\w}*/])'
                  r'(?:::(\w+))?')
LONE_TEST = re.compile(r'`::(\w+)')
LINK = re.compile(r'\]\(([^)\s#]*)(?:#([^)\s]*))?\)')
CODE = re.compile(r'```\w*\n(.*?)```|`([^`\n]+)`', re.S)
MAKE = re.compile(r'(?:^|[\s;&|(])make\s+([a-z][\w-]*)')
BENCHMARK = re.compile(r'tools/benchmarks/benchmark\.py\s+([a-z][\w-]*)')


def expand(path: str) -> list:
    """`a-{x,y}.py` -> [`a-x.py`, `a-y.py`] (brace expansion, as bash)."""
    parts = re.split(r'\{([^{}]*)\}', path)
    choices = [[part] if i % 2 == 0 else part.split(',')
               for i, part in enumerate(parts)]
    return [''.join(combo) for combo in itertools.product(*choices)]


def line_of(text: str, offset: int) -> int:
    return text.count('\n', 0, offset) + 1


def pages():
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            yield page, f.read()


def references():
    """(page, line, path, test name or None) for every repository path."""
    for page, text in pages():
        last_test_file = None
        found = [(m.start(), m.group(1), m.group(2))
                 for m in PATH.finditer(text)]
        found += [(m.start(), None, m.group(1))
                  for m in LONE_TEST.finditer(text)]
        for offset, path, name in sorted(found, key=lambda f: f[0]):
            if path is None:  # `::test_name` continues the last test file
                if last_test_file is None:
                    continue
                path = last_test_file
            elif path.startswith('tests/') and path.endswith('.py'):
                last_test_file = path
            for one in expand(path):
                yield page, line_of(text, offset), one, name


def make_targets() -> set:
    with open(os.path.join(ROOT, 'Makefile')) as f:
        return set(re.findall(r'^([\w.-]+)\s*:(?!=)', f.read(), re.M))


def code_spans(text: str):
    for m in CODE.finditer(text):
        yield m.start(), m.group(1) or m.group(2)


def report(problems: list) -> str:
    """One line per broken reference, then where the pages use it:

        configs/x.py (missing)
            README.md:12, docs/user_guides/pretraining.md:40
    """
    where = {}
    for problem, page, line in problems:
        where.setdefault(problem, set()).add((page, line))
    lines = [
        f'{len(where)} reference(s) in README.md/docs/ are not real '
        f'({len(problems)} uses):'
    ]
    for problem in sorted(where):
        lines.append(f'  {problem}')
        lines.append('      ' +
                     ', '.join(f'{page}:{line}'
                               for page, line in sorted(where[problem])))
    return '\n'.join(lines)


def test_the_pages_exist():
    for page in ('docs/get_started.md', 'docs/guarantees.md',
                 'docs/design_notes.md', 'docs/user_guides/pretraining.md',
                 'docs/user_guides/evaluation.md',
                 'docs/user_guides/detection_transfer.md',
                 'docs/user_guides/extending.md',
                 'docs/user_guides/performance.md'):
        assert page in PAGES, page


def test_every_referenced_path_exists():
    problems = []
    for page, line, path, _ in references():
        if path in EXAMPLE_FILES:
            continue
        if '*' in path:
            if not glob.glob(os.path.join(ROOT, path)):
                problems.append((f'{path} (matches no file)', page, line))
        elif not os.path.exists(os.path.join(ROOT, path)):
            problems.append((f'{path} (missing)', page, line))
    assert not problems, report(problems)


def test_every_named_test_exists():
    """`tests/x.py::test_y` (and a following `::test_z`) name a function
    or class that the file defines."""
    problems = []
    for page, line, path, name in references():
        if name is None or not os.path.isfile(os.path.join(ROOT, path)):
            continue  # a missing file is the test above's to report
        with open(os.path.join(ROOT, path)) as f:
            source = f.read()
        if not re.search(rf'^\s*(?:def|class) {name}\b', source, re.M):
            problems.append((f'{path}::{name} (no such test)', page, line))
    assert not problems, report(problems)


def anchors(path: str) -> set:
    """The anchors GitHub gives a Markdown file's headings: lower case,
    punctuation other than - and _ dropped, spaces as -."""
    with open(path) as f:
        headings = re.findall(r'^#+\s+(.*?)\s*$', f.read(), re.M)
    return {
        re.sub(r'[^\w\- ]', '', heading.lower()).replace(' ', '-')
        for heading in headings
    }


def test_every_relative_link_resolves():
    """Links between the pages (and into the repository) point to a file
    that exists and, with #anchor, to one of its headings."""
    problems = []
    for page, text in pages():
        for m in LINK.finditer(text):
            target, anchor = m.group(1), m.group(2)
            if re.match(r'[a-z]+:', target):  # http:, https:, mailto:
                continue
            path = os.path.normpath(
                os.path.join(ROOT, os.path.dirname(page), target
                             or os.path.basename(page)))
            where = (page, line_of(text, m.start()))
            if not os.path.exists(path):
                problems.append((f'{target} (link target missing)', ) + where)
            elif anchor and path.endswith('.md') and anchor not in anchors(
                    path):
                problems.append((f'{target}#{anchor} (no such heading)', ) +
                                where)
    assert not problems, report(problems)


def test_every_make_command_names_a_target():
    targets = make_targets()
    problems = []
    for page, text in pages():
        for offset, code in code_spans(text):
            for m in MAKE.finditer(code):
                if m.group(1) not in targets:
                    problems.append(
                        (f'make {m.group(1)} (no such target in Makefile: '
                         f'{", ".join(sorted(targets))})', page,
                         line_of(text, offset)))
    assert not problems, report(problems)


def test_every_benchmark_sub_command_exists():
    """`python tools/benchmarks/benchmark.py NAME` names a sub-command
    that the CLI declares."""
    cli = os.path.join(ROOT, 'tools', 'benchmarks', 'benchmark.py')
    problems = []
    for page, text in pages():
        for m in BENCHMARK.finditer(text):
            if not os.path.isfile(cli):
                break  # the path test reports the missing CLI
            with open(cli) as f:
                declared = f.read()
            if f"'{m.group(1)}'" not in declared:
                problems.append(
                    (f'tools/benchmarks/benchmark.py {m.group(1)} (no such '
                     'sub-command)', page, line_of(text, m.start())))
    assert not problems, report(problems)


def config_references() -> dict:
    configs = {}
    for page, line, path, _ in references():
        if (path.startswith('configs/') and path.endswith('.py')
                and path not in EXAMPLE_FILES
                and os.path.basename(path) != '*.py'):
            configs.setdefault(path, f'{page}:{line}')
    return configs


@pytest.mark.parametrize(
    'config',
    sorted(path for path in config_references()
           if os.path.isfile(os.path.join(ROOT, path))))
def test_referenced_config_loads(config):
    """(a missing config is reported by test_every_referenced_path_exists)"""
    Config.fromfile(os.path.join(ROOT, config))
