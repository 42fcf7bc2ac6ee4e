"""Event scheduling with conflict detection, priorities and free-slot search."""

from .model import Event, WorkingHours
from .scheduler import ConflictError, Scheduler

__all__ = ["ConflictError", "Event", "Scheduler", "WorkingHours"]
