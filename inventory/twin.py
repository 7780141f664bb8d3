"""The host twins that are up on this machine (see `remedy twin up`).

Each host is named after its twin, so `--limit NAME` picks one. Its data
carries the usual pyinfra ssh_* keys (key, port, the twin's own known_hosts
with strict checking), so a plain OpenSSH client reaches it the same way.
Nothing else differs from inventory/production.py.
"""

from remedy.inventory import checked_hosts
from remedy.twin.machine import inventory_hosts

twins = checked_hosts(inventory_hosts())
