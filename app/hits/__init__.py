"""HITs: building them from a study's items."""
