"""``python -m turnledger``: the same command line as the ``turnledger`` script."""

import sys

from turnledger.cli import main

sys.exit(main())
