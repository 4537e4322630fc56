"""Researcher accounts, passwords and API tokens."""
