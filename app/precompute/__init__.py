"""Precompute jobs: planning, shard leases, idempotent item writes, progress."""
