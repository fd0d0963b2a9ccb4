#!/usr/bin/env bash
# Distributed training with torchrun.
# Multi-node: run on every node with NNODES, NODE_RANK, MASTER_ADDR (and PORT)
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 tools/dist_train.sh CONFIG 8
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 CONFIG GPUS_PER_NODE [train.py options]" >&2
  exit 1
fi
# shellcheck source=tools/find_python.sh
source "$(cd "$(dirname "$0")" && pwd)/find_python.sh"
torchrun_tool train.py "$2" "$1" --launcher pytorch "${@:3}"
