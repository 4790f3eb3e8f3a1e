"""``python -m nsdist``: the ``nsdist`` command line."""
import sys

from .cli import main

if __name__ == "__main__":  # not in Dask's spawned worker processes, which import this module too
    sys.exit(main())
