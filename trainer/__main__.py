"""``torchrun --nproc_per_node N -m envhub.trainer CONFIG.yaml``: one trainer process per rank."""

import sys

from envhub.trainer.cli import main

sys.exit(main())
