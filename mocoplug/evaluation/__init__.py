# Copyright (c) mocoplug contributors. All rights reserved.
from .functional import *  # noqa: F401,F403
