#!/usr/bin/env bash
# The main job, on a twin: bring one up in production's broken state (as after the
# reboot of tt-stack#49), show its status and tool-call probe, run the restore
# deploy, show them again. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(scripts/setup.sh)
export PATH="$PWD/$VENV/bin:$PATH"
NAME=${REMEDY_DEMO_TWIN:-cfx-llm2}

remedy twin up --fresh --name "$NAME"
echo
echo "== before: remedy status inventory/twin.py --limit $NAME =="
remedy status inventory/twin.py --limit "$NAME" || echo "(exit $?: 4 = tool calls unparsed)"
echo
echo "== pyinfra inventory/twin.py deploys/restore_toolcalling.py -y --limit $NAME =="
pyinfra inventory/twin.py deploys/restore_toolcalling.py -y --limit "$NAME"
echo
echo "== after: remedy status inventory/twin.py --limit $NAME =="
remedy status inventory/twin.py --limit "$NAME"
echo
echo "The twin stays up. Try: remedy twin reboot --name $NAME  (the fix survives),"
echo "remedy audit, remedy runbooks show 001 --manual, remedy twin down --name $NAME."
