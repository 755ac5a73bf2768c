"""``python -m studio`` is the same as the ``cosyvoice-studio`` command."""

import sys

from studio.cli import main

if __name__ == "__main__":
    sys.exit(main())
