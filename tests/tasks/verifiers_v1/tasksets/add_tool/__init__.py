"""A tool-using Verifiers v1 taskset (local data only): add two numbers with the taskset's `add` tool."""

from add_tool.taskset import AddToolTaskset

__all__ = ["AddToolTaskset"]
