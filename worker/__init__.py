"""Precompute worker: prefixes and next-word choices (the only package that imports torch)."""
