"""`python -m fedhet.cli`: the `fedhet` command."""

import sys

from fedhet.cli import main

sys.exit(main())
