#!/usr/bin/env bash
# Make a Docker engine and bubblewrap available on a Debian machine, idempotently.
#
#   1. apt-get install docker.io bubblewrap debootstrap (and python3-pytest, which bwrap
#      sandboxes use from the host's /usr) when any is missing; `apt-get update` only if needed;
#   2. start dockerd in the background when `docker info` does not answer;
#   3. wait (bounded) until it answers, or fail with a clear message.
#
# Needs root (or passwordless sudo). Safe to run any number of times. Used by .ci/run and
# documented for users in the README. Env: DOCKER_WAIT_S (default 60), DOCKERD_LOG.
set -euo pipefail

WAIT_S="${DOCKER_WAIT_S:-60}"
DOCKERD_LOG="${DOCKERD_LOG:-/var/log/envhub-dockerd.log}"
PACKAGES=(docker.io bubblewrap debootstrap python3-pytest)

say() { printf '[docker-up] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: run this script as root"
    SUDO="sudo -n"
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get: install them by hand"
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
        say "apt-get install failed; running apt-get update first"
        $SUDO apt-get update -qq || die "apt-get update failed (is an apt mirror reachable?)"
        $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null \
            || die "apt-get install ${missing[*]} failed"
    fi
fi

if docker info >/dev/null 2>&1; then
    say "docker engine already answers"
    exit 0
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
    command -v dockerd >/dev/null 2>&1 || die "dockerd not found after installing docker.io"
    say "starting dockerd (log: $DOCKERD_LOG)"
    # setsid + nohup: the daemon outlives this script and the CI step that ran it.
    $SUDO sh -c "setsid nohup dockerd >>'$DOCKERD_LOG' 2>&1 < /dev/null &"
fi

deadline=$((SECONDS + WAIT_S))
until docker info >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        say "last lines of $DOCKERD_LOG:"
        $SUDO tail -n 30 "$DOCKERD_LOG" >&2 2>/dev/null || true
        die "the docker engine did not answer within ${WAIT_S}s"
    fi
    sleep 1
done
say "docker engine is up ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
