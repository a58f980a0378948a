"""`python -m herald` runs the command line."""

from herald.cli import app

app()
