"""ebc-judge: exposure bias (EB-C) of language models, measured with human judges."""

__version__ = "0.1.0"
