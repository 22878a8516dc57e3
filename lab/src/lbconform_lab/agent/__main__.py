"""Entry point: ``python -m lbconform_lab.agent``."""

import sys

from lbconform_lab.agent.main import main

sys.exit(main())
