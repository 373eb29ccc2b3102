"""Command line of q-view."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("q-view: not implemented yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
