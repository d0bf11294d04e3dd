"""``python -m cluster.perf ...`` runs ``rayton perf`` without the rayton entry point."""

import sys

from cluster.perf.cli import main

sys.exit(main())
