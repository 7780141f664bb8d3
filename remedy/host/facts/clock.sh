# The host's local time with its UTC offset (restart windows are in the serving
# host's time), and its machine id (the manual script's host guard).
echo "@@remedy:section clock"
date '+%Y-%m-%dT%H:%M:%S%z'
echo "@@remedy:section host.id"
{ read -r _mid </etc/machine-id; } 2>/dev/null && printf '%s\n' "$_mid"
