"""``python -m deployments.cli``: the ``rayton`` command."""

import sys

from deployments.cli import main

sys.exit(main())
