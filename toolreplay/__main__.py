"""Allow `python -m toolreplay`."""

import sys

from toolreplay.cli import main

sys.exit(main())
