#!/usr/bin/env bash
# Debian's Chromium for the browser tests (test/browser), driven by playwright-core.
#
#   scripts/chromium.sh install   # installs the chromium package when /usr/bin/chromium is missing
#
# apt-get runs as root or through sudo. No browser is downloaded from anywhere else.
set -euo pipefail

log() { echo "chromium.sh: $*" >&2; }
# shellcheck source=scripts/apt.sh
. "$(dirname "$0")/apt.sh"

install_chromium() {
  if [ -x /usr/bin/chromium ]; then log "$(/usr/bin/chromium --version 2>/dev/null || echo chromium) is installed"; return; fi
  apt_install chromium
  log "$(/usr/bin/chromium --version 2>/dev/null) installed"
}

case "${1:-}" in
  install) install_chromium ;;
  *) echo "usage: $0 install" >&2; exit 2 ;;
esac
