"""``python -m tandv_tb findings LOGDIR ...``: the ``tandv-tb`` command (``diagnosis.cli``)."""

import sys

from tandv_tb.diagnosis.cli import main

sys.exit(main())
