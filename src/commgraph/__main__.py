"""``python -m commgraph`` is the ``commgraph`` command."""

import sys

from commgraph.cli.main import main

sys.exit(main())
