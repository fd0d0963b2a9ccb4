#!/usr/bin/env bash
# Distributed training with torchrun.
#   tools/dist_train.sh CONFIG GPUS [train.py options]
# Multi-node: run on every node with NNODES, NODE_RANK, MASTER_ADDR (and PORT)
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 tools/dist_train.sh CONFIG 8
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 CONFIG GPUS_PER_NODE [train.py options]" >&2
  exit 1
fi
CONFIG=$1
GPUS=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tools/find_python.sh
source "$ROOT/tools/find_python.sh"
PYTHON=$(find_python "$ROOT")

PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
"$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --master_port="$PORT" \
    --nproc_per_node="$GPUS" \
    "$ROOT/tools/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
