"""``python -m txjoin.cli``: the same as the ``txjoin`` command."""

import sys

from txjoin.cli import main

sys.exit(main())
