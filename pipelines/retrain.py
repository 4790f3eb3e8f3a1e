"""One scheduled retraining cycle: ``python -m pipelines.retrain conf/retrain.yaml [--scheduler ADDRESS]``.

The same as ``nsdist retrain`` (see :mod:`nsdist.retrain` and docs/scheduling.md), for
schedulers that run Python modules rather than console scripts.
"""
from __future__ import annotations

import sys

from nsdist.retrain import main

if __name__ == "__main__":
    sys.exit(main())
