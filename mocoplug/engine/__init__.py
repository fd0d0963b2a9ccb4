# Copyright (c) mocoplug contributors. All rights reserved.
from .hooks import *  # noqa: F401,F403
from .optimizers import *  # noqa: F401,F403
from .runner import *  # noqa: F401,F403
