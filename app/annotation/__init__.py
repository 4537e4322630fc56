"""Annotators: invite links, assignments, submissions, crowd channels."""
