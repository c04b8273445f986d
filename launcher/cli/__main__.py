"""`python -m topl.launcher.cli ...` is `topl ...`."""

import sys

from topl.launcher.cli import main

sys.exit(main())
