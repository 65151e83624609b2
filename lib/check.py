"""``python -m lib.check`` in a checkout: the same as ``gradient-lab check`` (``gradient_lab.cli``).

It imports Gradient Lab by its package name, so that a user's module that declares its families with
``from gradient_lab import declare`` registers them where the command reads them.
"""

import sys

if __name__ == "__main__":
    from gradient_lab.cli import main

    sys.exit(main(["check", *sys.argv[1:]]))
