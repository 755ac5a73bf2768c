"""The frozen studio's entry: the same command line as ``cosyvoice-studio`` (no arguments: the window).

``freeze_support`` lets the engine process (multiprocessing, spawn) start from the frozen executable.
"""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()
    from studio.cli import main

    sys.exit(main())
