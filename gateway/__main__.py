"""``python -m gateway serve …`` is ``flowrank serve …``."""

import sys

from gateway.cli import main

if __name__ == "__main__":  # a spawned helper process (engine.runtime.outbox_feed) imports it too
    sys.exit(main())
