# Copyright (c) mocoplug contributors. All rights reserved.
import subprocess
import sys


def test_mmpretrain_components_resolve_from_mocoplug_scope():
    """In a fresh process, `import mocoplug` is enough to reach mmpretrain
    components that nothing has imported yet: mmengine imports only a
    registry node's own locations before a look-up, so mocoplug's nodes
    list their mmpretrain parent's too. mmpretrain.visualization is one
    that mocoplug never imports itself."""
    script = (
        'import sys, mocoplug\n'
        'assert "mmpretrain.visualization" not in sys.modules\n'
        'from mocoplug.registry import OPTIMIZERS, VISUALIZERS\n'
        'assert VISUALIZERS.get("UniversalVisualizer") is not None\n'
        'assert OPTIMIZERS.get("LARS").__module__.startswith("mmpretrain")\n'
        'print("ok")\n')
    out = subprocess.run([sys.executable, '-c', script],
                         capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == 'ok'
