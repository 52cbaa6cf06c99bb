"""`python -m jobset_controller.envtest`: run a local control plane until Ctrl-C."""

from jobset_controller.envtest.serve import main

raise SystemExit(main())
