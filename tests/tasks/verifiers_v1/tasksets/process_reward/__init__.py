"""A Verifiers v1 taskset whose grader is wrong on purpose: its reward depends on the process that
scores it, so the same answers earn different rewards in different runs."""

from process_reward.taskset import ProcessRewardTaskset

__all__ = ["ProcessRewardTaskset"]
