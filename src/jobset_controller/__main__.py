"""`python -m jobset_controller` is the `jobset-controller` command."""

from jobset_controller.console import jobset_controller

jobset_controller()
