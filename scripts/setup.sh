#!/usr/bin/env bash
# Create .venv with the exact versions of requirements.lock and install sacbench into it.
# pip + venv on purpose: pip finds the machine's local torch wheel (CPU build) when there is one;
# elsewhere it installs torch==2.13.0 from the package index. Safe to rerun: it only adds what
# is missing. Usage: bash scripts/setup.sh   (then: . .venv/bin/activate)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

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
.venv/bin/python -m pip install --quiet -r requirements.lock
.venv/bin/python -m pip install --quiet --no-deps -e .
echo "ready: . .venv/bin/activate"
