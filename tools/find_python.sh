# shellcheck shell=bash
# Sourced by tools/dist_train.sh, tools/dist_test.sh and tools/slurm_train.sh:
# the Python that runs mocoplug (order: docs/design_notes.md,
# "tools/find_python.sh") and the torchrun launch they share.

# find_python ROOT: print the Python to use
find_python() {
  local root=$1 venv=${MOCOPLUG_VENV:-$1/.venv}
  if [ -n "${PYTHON:-}" ]; then
    echo "$PYTHON"
    return 0
  fi
  if command -v python >/dev/null 2>&1 && python -c '
import importlib.util, sys
sys.exit(not all(importlib.util.find_spec(m) for m in ("torch", "mmengine")))
' 2>/dev/null; then
    echo python
    return 0
  fi
  if [ -x "$venv/bin/python" ]; then
    echo "using $venv/bin/python (set PYTHON to choose another)" >&2
    echo "$venv/bin/python"
    return 0
  fi
  echo "error: no Python with torch and mmengine: \`python\` on PATH lacks" \
    "them and $venv/bin/python does not exist. Run \`make demo\` (or" \
    "tools/setup_env.sh) in $root to create it, activate the environment" \
    "you installed mocoplug in, or set PYTHON=/path/to/python." >&2
  return 1
}

# torchrun_tool SCRIPT GPUS_PER_NODE [ARGS...]: run tools/SCRIPT ARGS under
# torch.distributed.run with this checkout on PYTHONPATH, one process per
# GPU; multi-node through NNODES, NODE_RANK, MASTER_ADDR and PORT.
torchrun_tool() {
  local root python script=$1 gpus=$2
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  python=$(find_python "$root")
  shift 2
  PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" "$python" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}" --master_addr="${MASTER_ADDR:-127.0.0.1}" \
    --master_port="${PORT:-29500}" --nproc_per_node="$gpus" "$root/tools/$script" "$@"
}
