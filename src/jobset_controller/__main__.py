"""`python -m jobset_controller` is the `jobset-controller` command."""

from jobset_controller.cli import main

raise SystemExit(main())
