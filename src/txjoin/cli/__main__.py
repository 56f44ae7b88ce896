"""``python -m txjoin.cli``: the same as the ``txjoin`` command."""

from txjoin.cli import command

command()
