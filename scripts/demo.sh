#!/usr/bin/env bash
# The main job, on a twin: bring one up in production's state (tool calling held by the
# emergency /run override, everything else as the stale Nix config says), show the
# drift per managed setting, print the plan, converge it (under the default restart
# policy: durable at next boot, no restart, since live serves the right parser), show
# it again (boot pending), reboot the twin and show that everything holds. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(scripts/setup.sh)
export PATH="$PWD/$VENV/bin:$PATH"
NAME=${REMEDY_DEMO_TWIN:-cfx-llm2}

remedy twin up --fresh --with-emergency-override --name "$NAME"
echo
echo "== before: remedy status inventory/twin.py --limit $NAME =="
remedy status inventory/twin.py --limit "$NAME" || echo "(exit $?: 3 = volatile or drifted)"
echo
echo "== the plan: pyinfra inventory/twin.py deploys/converge.py --dry --limit $NAME =="
pyinfra inventory/twin.py deploys/converge.py --dry --limit "$NAME"
echo
echo "== pyinfra inventory/twin.py deploys/converge.py -y --limit $NAME =="
pyinfra inventory/twin.py deploys/converge.py -y --limit "$NAME"
echo
echo "== after: remedy status inventory/twin.py --limit $NAME =="
remedy status inventory/twin.py --limit "$NAME" \
  || echo "(exit $?: 6 = boot pending: durable at next boot, no restart yet)"
echo
echo "== remedy twin reboot --name $NAME, then status again (no run in between) =="
remedy twin reboot --name "$NAME"
remedy status inventory/twin.py --limit "$NAME"
echo
echo "The twin stays up. Try: remedy audit, remedy runbooks show 006 --manual,"
echo "pyinfra inventory/twin.py deploys/converge.py -y --limit $NAME (changes nothing),"
echo "remedy converge inventory/twin.py --restart now (activates without a reboot),"
echo "remedy twin down --name $NAME."
