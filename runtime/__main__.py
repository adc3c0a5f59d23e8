"""`python -m hpcplace.runtime ...` is `hpcplace-run ...`."""

import sys

from hpcplace.runtime.shim import main

sys.exit(main())
