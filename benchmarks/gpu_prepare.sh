#!/bin/bash
# Prepares `benchmarks/gpu.sh` (run here, from the project's root, before the device tool's run):
# ../shared/gpu/prepare.sh puts the web stack's wheels into the git-ignored .gpu/; the worker's
# claims benchmark also imports itsdangerous (through app.annotation), which that list lacks.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bash ../shared/gpu/prepare.sh
py=.venv/bin/python; [ -x "$py" ] || py=python3
v=$("$py" -c "import importlib.metadata as m; print(m.version('itsdangerous'))")
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  -d .gpu/whl "itsdangerous==$v"
