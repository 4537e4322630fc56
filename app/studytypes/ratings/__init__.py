"""The ratings study type (docs/design.md "Second protocol"): annotators rate a continuation's
quality, then, its context shown, its consistency; the results are the mean ratings per
prefix kind and EB-M. Its plug-in is ``plugin.RATINGS``."""
