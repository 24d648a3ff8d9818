"""`python -m pymtp ...` is the `pymtp` command."""

import sys

from .cli import main

sys.exit(main())
