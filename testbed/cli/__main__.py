"""``python -m testbed.cli``: the ``testbed`` command."""

from testbed.cli.app import main

main()
