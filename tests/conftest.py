"""Shared pytest configuration: nothing here may hide a failure or skip a test that should run."""

import os

os.environ.setdefault("ENVHUB_TESTING", "1")
