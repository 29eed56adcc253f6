"""``python -m simulator``: see :mod:`simulator.cli`."""

import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line itself is imported
    print("interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
