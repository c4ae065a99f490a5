"""``python -m streammap.cli``: the same as the ``streammap`` command."""

import sys

from streammap.cli import main

sys.exit(main())
