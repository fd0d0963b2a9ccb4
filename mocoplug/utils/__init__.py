# Copyright (c) mocoplug contributors. All rights reserved.
from .checkpoint_compat import (load_from_local, register_checkpoint_loader,
                                trusted_globals)

__all__ = ['load_from_local', 'register_checkpoint_loader', 'trusted_globals']
