#!/usr/bin/env bash
# Create .venv with the exact versions of requirements.lock (what running the pipeline needs) and
# install sacbench into it; --dev installs requirements-dev.lock instead: the same plus the test
# and lint tools (pytest, ruff, snakefmt), as CI does. pip + venv on purpose: pip finds the
# machine's local torch wheel (CPU build) when there is one; elsewhere it installs torch==2.13.0
# from the package index. Safe to rerun: it only adds what is missing. --no-render-check skips
# the check (and install) of the Debian packages for headless rendering below: for .ci/run, which
# installs them itself at the same time.
# Usage: bash scripts/setup.sh [--dev] [--no-render-check]   (then: . .venv/bin/activate)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

lock=requirements.lock
render_check=yes
for argument in "$@"; do
  case "$argument" in
    --dev) lock=requirements-dev.lock ;;
    --no-render-check) render_check=no ;;
    *)
      echo "usage: bash scripts/setup.sh [--dev] [--no-render-check] (unknown argument: $argument)" >&2
      exit 2
      ;;
  esac
done

python_for_venv() {
  local candidate
  for candidate in "${PYTHON:-}" python3.11 python3; do
    [[ -n "$candidate" ]] || continue
    if command -v "$candidate" >/dev/null \
      && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      echo "$candidate"
      return 0
    fi
  done
  echo "sacbench needs Python 3.11 (requirements.lock is resolved for it); set PYTHON=/path/to/python3.11" >&2
  return 1
}

if [[ ! -x .venv/bin/python ]]; then
  interpreter=$(python_for_venv)
  echo "creating .venv with $interpreter ($("$interpreter" --version))"
  "$interpreter" -m venv .venv
fi
# A pinned pip: older ones download every wheel to read its metadata in a dry run, which makes
# scripts/check_lock_resolves.py fetch gigabytes.
.venv/bin/python -m pip install --quiet pip==26.3
.venv/bin/python -m pip install --quiet -r "$lock"
.venv/bin/python -m pip install --quiet --no-deps -e .

# Videos (--capture-video, and the smoke preset's one video) render MuJoCo headless through EGL
# with Mesa's software renderer: Debian packages, which pip cannot install. Installed here only
# when rendering fails and apt-get can run as root; otherwise the message says what to install.
RENDER_PACKAGES="libegl1 libegl-mesa0 libgl1-mesa-dri libopengl0"
can_render() {
  .venv/bin/python -c 'from sacbench.training.video import use_headless_rendering, check_rendering
use_headless_rendering(); check_rendering("InvertedPendulum-v4")' >/dev/null 2>&1
}
if [[ $render_check == yes ]] && ! can_render; then
  if command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
    echo "installing Mesa's EGL renderer for headless MuJoCo videos: $RENDER_PACKAGES"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      $RENDER_PACKAGES >/dev/null
  fi
  if ! can_render; then
    echo "warning: MuJoCo cannot render here, so videos (--capture-video, the smoke preset's" \
      "InvertedPendulum-v4 video) will fail; on Debian/Ubuntu: sudo apt-get install" \
      "$RENDER_PACKAGES" >&2
  fi
fi
echo "ready: . .venv/bin/activate"
