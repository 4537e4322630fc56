#!/bin/bash
# The worker's GPU figures, for a session lent a GPU machine (see docs/benchmarks.md, "A GPU
# run"): `bash benchmarks/gpu_prepare.sh`, then from the device tool, in the tree with .gpu/:
# `bash benchmarks/gpu.sh` (about 5 minutes on an H200; files in $OUT).
set -o pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .gpu/whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
B="python3 benchmarks/precompute.py --device cuda --bound-tokens 32768 --no-count-operations"
# The operation counts are deterministic: the CPU's table holds them (docs/benchmarks.md).
timeout 150 $B --items 1024 --lengths 10,20,30,100 --naive-sample 1 --memory-items 256 \
  --kind-items 256 2>&1 | tee "$OUT/precompute_fp32.txt"
timeout 100 $B --dtype bfloat16 --items 1024 --lengths 10,20,30 --naive-sample 1 --memory-items 0 \
  --kind-items 0 2>&1 | tee "$OUT/precompute_bf16.txt"
timeout 100 python3 benchmarks/gpu_steps.py --lengths 20 2>&1 | tee "$OUT/gpu_steps.txt"
timeout 80 python3 benchmarks/worker_claims.py --device cuda --items 1024 --shard-size 256 \
  2>&1 | tee "$OUT/worker_claims.txt"
timeout 60 python3 benchmarks/host_profile.py --device cuda 2>&1 | tee "$OUT/host_profile.txt"
echo ALL-DONE
