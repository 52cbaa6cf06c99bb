"""What users run besides the controller: ``plan``, ``status`` (also ``kubectl jobset``).

Why a room of its own: these commands answer questions about JobSets ("what will this create?",
"why is it not running?") with the controller's own code, so their answers cannot drift from what
the controller does. ``plan`` runs the real ``reconcile``; ``status`` reads the objects through
our ``KubeClient`` and the paths of ``controller.resources``.

Layering: ``tools`` sits beside ``manager`` (under ``cli``) and may import ``config``,
``controller``, ``reconcile``, ``runtime`` and ``api``. The deciding and drawing modules are pure
(the ``tools-pure`` import contract keeps ``runtime`` and ``controller`` out of them):

* ``plan``: simulate reconcile passes on an empty cluster (pure);
* ``plan_render``: the simulation as text or as manifests (pure);
* ``documents``: YAML documents as the API server reads them, one-line messages (shared with
  ``validate``);
* ``kubeconfig``: kubectl's KUBECONFIG / --context / --namespace rules (pure, plus file reading);
* ``status_model`` / ``diagnosis`` / ``status_tree``: a JobSet and its children, the one-line
  diagnosis, the tree (pure);
* ``status_reader``: the thin I/O that fills ``status_model`` from the API server;
* ``commands``: the flags and runs of ``plan`` and ``status`` that ``cli`` wires in (the
  ``kubectl-jobset`` entry point is ``cli``'s).
"""
