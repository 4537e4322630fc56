"""`python -m app.cli`: the `ebc` command without its console script."""

from app.cli import main

main()
