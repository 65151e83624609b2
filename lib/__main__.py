"""``python -m gradient_lab check …`` / ``python -m gradient_lab app …``: the ``gradient-lab`` command."""

import sys

from .cli import main

sys.exit(main())
