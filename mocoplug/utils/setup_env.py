# Copyright (c) mocoplug contributors. All rights reserved.
from mmengine.registry import DefaultScope


def register_all_modules(init_default_scope: bool = True) -> None:
    """Register mocoplug's components and, with ``init_default_scope``,
    make ``'mocoplug'`` the default scope unless one is set."""
    import mocoplug.datasets  # noqa: F401,F811
    import mocoplug.engine  # noqa: F401,F811
    import mocoplug.evaluation  # noqa: F401,F811
    import mocoplug.models  # noqa: F401,F811
    if init_default_scope and DefaultScope.get_current_instance() is None:
        DefaultScope.get_instance('mocoplug', scope_name='mocoplug')
