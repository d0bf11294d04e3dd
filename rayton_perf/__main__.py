"""``python -m rayton_perf ...`` runs ``rayton perf`` without the rayton entry point."""

import sys

from rayton_perf.cli import main

sys.exit(main())
