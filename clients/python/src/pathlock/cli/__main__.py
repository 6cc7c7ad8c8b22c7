"""`python -m pathlock.cli`: the `pathlock` command."""

import sys

from . import main

sys.exit(main())
