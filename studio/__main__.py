"""``python -m studio`` is the same as the ``cosyvoice-studio`` command."""

import sys

from studio.cli import main

if __name__ == "__main__":
    # A child that multiprocessing spawns (vLLM's engine core) imports the parent's main module before anything
    # else, by name or, where it has no spec, by path; by name it skips a package's __main__ and so would not
    # import the studio, whose first import makes it end with its parent (`lifetime.arm_if_spawning`). By path
    # it runs this file as ``__mp_main__``: the import above, not `main`.
    __spec__ = None
    sys.exit(main())
