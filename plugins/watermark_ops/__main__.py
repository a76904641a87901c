"""``python -m watermark_ops``: the same as the ``watermark-ops`` console script (see :mod:`watermark_ops.cli`)."""

import sys

from watermark_ops.cli import main

if __name__ == "__main__":
    sys.exit(main())
