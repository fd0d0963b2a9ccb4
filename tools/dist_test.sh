#!/usr/bin/env bash
# Distributed evaluation with torchrun (multi-node as tools/dist_train.sh).
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 CONFIG CHECKPOINT GPUS_PER_NODE [test.py options]" >&2
  exit 1
fi
# shellcheck source=tools/find_python.sh
source "$(cd "$(dirname "$0")" && pwd)/find_python.sh"
torchrun_tool test.py "$3" "$1" "$2" --launcher pytorch "${@:4}"
