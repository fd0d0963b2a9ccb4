# Copyright (c) mocoplug contributors. All rights reserved.
__version__ = '0.1.0'
version_info = tuple(int(part) for part in __version__.split('.'))
