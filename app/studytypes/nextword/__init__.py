"""The next-word study type (docs/design.md §1): annotators pick the most plausible next word among
the model's top-k, shuffled, or "None of the above"; the results are CGD and EB-C. Its
plug-in is ``plugin.NEXTWORD``."""
