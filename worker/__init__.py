"""Precompute worker: prefixes and next-word choices (the only package that imports torch).

OpenMP's threads sleep when they have no work (``OMP_WAIT_POLICY=PASSIVE``) instead of spinning
for it: between a step's small operations, and through the sampler's and word search's Python,
torch's second thread otherwise burnt a CPU.  On the 2-core CPU (2026-11-26, 256 items at
l = 20, GPT-2 small's shape) a shard's run took 13 % less CPU time in the same wall-clock time
(65.0 against 56.6 CPU s, 33.0 s wall clock both), CPU time that a shared machine's other
processes get.  libgomp reads the variable once, when torch loads, so it is set here, before any
module of the worker imports torch; an operator's own setting wins.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
