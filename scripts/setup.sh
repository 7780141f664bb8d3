#!/usr/bin/env bash
# Installs everything remedy and its twin need on a fresh Debian machine (as root):
# Debian packages for the twin, then the project and its dev tools in a venv.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v systemd-nspawn >/dev/null || need_apt+=(systemd-container)
# The twin bases are Debian trixie and bookworm: debootstrap must know both suites.
if ! command -v debootstrap >/dev/null \
  || [ ! -e /usr/share/debootstrap/scripts/trixie ] \
  || [ ! -e /usr/share/debootstrap/scripts/bookworm ]; then
  need_apt+=(debootstrap)
fi
{ command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; } || need_apt+=(openssh-client)
command -v nsenter >/dev/null || need_apt+=(util-linux)
command -v git >/dev/null || need_apt+=(git)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# the host programs' lint (tests/unit/test_one_engine.py), and the two shells they
# are run under
command -v shellcheck >/dev/null || need_apt+=(shellcheck)
command -v dash >/dev/null || need_apt+=(dash)
# the shipped alert rules' checks (promtool, in CI before any test) and the twin test that
# runs them in a real Prometheus scraping a real node exporter (tests/twin/test_alerts.py)
{ command -v promtool >/dev/null && command -v prometheus >/dev/null; } || need_apt+=(prometheus)
command -v prometheus-node-exporter >/dev/null || need_apt+=(prometheus-node-exporter)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
  apt-get install -y -q "${need_apt[@]}" >&2
fi

VENV=${REMEDY_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV" >&2
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >&2
"$VENV/bin/python" -m pip install -q -e '.[dev]' >&2
echo "$VENV"
