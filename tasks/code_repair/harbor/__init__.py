"""The Harbor export of code-repair instances (``envhub tasks export envhub/CodeRepair-v0 --format harbor``).

:func:`~.export.export_instance` writes one Harbor task directory; :mod:`.grade` is the
standalone, standard-library-only grader it copies into the task's ``tests/`` as ``grade.py``
(it runs inside the Harbor container, never imported by envhub).
"""

from .export import export_instance

__all__ = ["export_instance"]
