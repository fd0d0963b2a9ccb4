# Copyright (c) mocoplug contributors. All rights reserved.
from typing import Any, Callable


def walk_dicts(node: Any, fn: Callable[[dict], None]) -> None:
    """Call ``fn`` on every dict inside ``node`` (a config or part of one),
    nested dicts, lists and tuples included, parents before children."""
    if isinstance(node, dict):
        fn(node)
        for value in node.values():
            walk_dicts(value, fn)
    elif isinstance(node, (list, tuple)):
        for value in node:
            walk_dicts(value, fn)
