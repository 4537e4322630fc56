#!/bin/bash
# The worker's GPU figures, for a session lent a GPU machine (see docs/benchmarks.md, "A GPU
# run"): `bash ../shared/gpu/prepare.sh`, then from the device tool, in the tree with .gpu/:
# `bash benchmarks/gpu.sh` (about 9 minutes on an H200; files in $OUT).
set -o pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .gpu/whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
timeout 180 python3 benchmarks/gpu_steps.py 2>&1 | tee "$OUT/gpu_steps.txt"
B="python3 benchmarks/precompute.py --device cuda --bound-tokens 32768"
timeout 150 $B --items 1024 --lengths 10,20,30 --naive-sample 2 --memory-items 0 2>&1 | tee "$OUT/precompute_fp32.txt"
timeout 120 $B --dtype bfloat16 --items 1024 --lengths 10,20,30 --naive-sample 2 --memory-items 0 \
  --no-count-operations 2>&1 | tee "$OUT/precompute_bf16.txt"
timeout 90 $B --items 1024 --lengths 100 --naive-sample 1 --memory-items 256 --no-count-operations \
  2>&1 | tee "$OUT/precompute_l100.txt"
timeout 150 python3 benchmarks/worker_claims.py --device cuda --items 2048 --shard-size 256 \
  2>&1 | tee "$OUT/worker_claims.txt"
echo ALL-DONE
