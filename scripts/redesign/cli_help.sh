#!/usr/bin/env bash
# Every public command's --help, for a before/after diff:  bash cli_help.sh REPO > help.txt
set -euo pipefail
repo=$(cd "$1" && pwd)
cd "$repo"
export PYTHONPATH="$repo" COLUMNS=100 TERM=dumb NO_COLOR=1 PYTHONWARNINGS=ignore
for command in "sacbench.train" "sacbench.report" "sacbench.report extract" \
    "sacbench.report runtimes" "sacbench.report returns" "sacbench.report aggregate" \
    "sacbench.report plots" "sacbench.status"; do
  echo "==== python -m $command --help"
  # shellcheck disable=SC2086
  python -m $command --help 2>&1
done
