"""Results: CGD and EB-C from the judgments, with error bars, agreement and quality."""
