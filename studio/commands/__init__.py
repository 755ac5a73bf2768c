"""Subcommands of the ``cosyvoice-studio`` command line, one module each."""
