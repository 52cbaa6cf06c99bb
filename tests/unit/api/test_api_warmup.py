"""api/warmup.py: after `warm_up()`, a JobSet's first reconcile-shaped use (validate, default,
check, dump) builds no validator or serialiser. Run in a fresh interpreter: this test process has
long since built them all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

PROBE = """
import sys, yaml
from pydantic._internal._mock_val_ser import MockValSer
from jobset_controller.api import JobSet, default_jobset, validate_create, types
from jobset_controller.api.warmup import warm_up

def classes(base):
    for sub in base.__subclasses__():
        yield sub
        yield from classes(sub)

def unbuilt():
    return sorted(
        c.__name__ for c in set(classes(types.WireModel))
        if isinstance(c.__pydantic_validator__, MockValSer)
        or isinstance(c.__pydantic_serializer__, MockValSer)
    )

cold = unbuilt()
warm_up()
warm = unbuilt()
for path in sys.argv[1:]:
    for document in yaml.safe_load_all(open(path)):
        if document and document.get("kind") == "JobSet":
            js = default_jobset(JobSet.model_validate(document))
            validate_create(js)
            js.to_dict()
print(len(cold), "JobSet" in warm, warm == unbuilt())
"""


def test_after_warm_up_the_first_jobset_builds_nothing() -> None:
    paths = [str(p) for p in sorted(EXAMPLES.glob("*.yaml"))]
    assert paths
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *paths], capture_output=True, text=True, check=True
    )
    cold, jobset_unbuilt, nothing_built_after = done.stdout.split()
    assert int(cold) > 20  # deferred to first use at import (types.WireModel)
    assert jobset_unbuilt == "False"
    assert nothing_built_after == "True"
