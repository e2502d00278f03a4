"""`python -m taso_tvm.cli ...`: the `taso-tvm` command."""
import sys

from . import main

sys.exit(main())
