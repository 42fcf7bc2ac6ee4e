"""``python tests/trainer/train_script.py CONFIG [--set k=v] [--resume]`` (or under torchrun): the
trainer's command line with the learning-test env registered, for tests that train in a subprocess."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from letter_env import register_test_env

from envhub.trainer.cli import main

register_test_env()
sys.exit(main())
