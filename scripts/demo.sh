#!/usr/bin/env bash
# The main job, on a twin: bring one up in production's broken state, show the
# tool-call probe, run the restore deploy, show the probe again.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(scripts/setup.sh)
export PATH="$PWD/$VENV/bin:$PATH"
NAME=${REMEDY_DEMO_TWIN:-cfx-llm2}

remedy twin up --name "$NAME"
echo
echo "== before: the tool-call probe on $NAME =="
remedy probe inventory/twin.py --limit "$NAME" || true
if [ -f deploys/restore_toolcalling.py ]; then
  echo
  echo "== pyinfra inventory/twin.py deploys/restore_toolcalling.py -y =="
  pyinfra inventory/twin.py deploys/restore_toolcalling.py -y --limit "$NAME"
  echo
  echo "== after =="
  remedy probe inventory/twin.py --limit "$NAME"
fi
echo
echo "The twin stays up: 'remedy twin reboot --name $NAME' to see what survives a reboot,"
echo "'remedy twin down --name $NAME' to remove it."
