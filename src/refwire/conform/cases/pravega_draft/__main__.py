"""``python -m refwire.conform.cases.pravega_draft HOST:PORT | --list``: §13's
pre-create step against refwire's store (:func:`~.segments.main`)."""

import sys

from .segments import main

if __name__ == "__main__":
    sys.exit(main())
