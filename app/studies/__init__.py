"""Studies: configuration, creation, status."""
