"""`python -m jobset_controller_dev.envtest [--full]`: run a local control plane until Ctrl-C."""

import sys

from jobset_controller_dev.envtest.serve import main

raise SystemExit(main(sys.argv[1:]))
