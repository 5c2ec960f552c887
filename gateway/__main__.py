"""``python -m gateway serve …`` is ``flowrank serve …``."""

import sys

from gateway.cli import main

sys.exit(main())
