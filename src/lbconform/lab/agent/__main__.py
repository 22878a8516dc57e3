"""Entry point: ``python -m lbconform.lab.agent``."""

import sys

from lbconform.lab.agent.main import main

sys.exit(main())
