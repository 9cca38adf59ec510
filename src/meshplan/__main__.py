"""`python -m meshplan` runs the command-line interface."""

from meshplan.cli import main

main()
