"""`python -m vkgraph ...` is the `vkgraph` command."""

import sys

from vkgraph.cli.main import main

sys.exit(main())
