# Copyright (c) mocoplug contributors. All rights reserved.
__version__ = '0.1.0'


def parse_version_info(version_str: str) -> tuple:
    """Parse a version string like ``'0.1.0'`` into a tuple."""
    info = []
    for part in version_str.split('.'):
        if part.isdigit():
            info.append(int(part))
        else:
            digits = ''.join(c for c in part if c.isdigit())
            info.append(int(digits) if digits else part)
    return tuple(info)


version_info = parse_version_info(__version__)
