#!/usr/bin/env bash
# Debian's Chromium for the browser tests (test/browser), driven by playwright-core.
#
#   scripts/chromium.sh install   # installs the chromium package when /usr/bin/chromium is missing
#
# apt-get runs as root or through sudo. No browser is downloaded from anywhere else.
set -euo pipefail

log() { echo "chromium.sh: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else log "need root (or sudo) to run: $*"; exit 1
  fi
}

install_chromium() {
  if [ -x /usr/bin/chromium ]; then log "$(/usr/bin/chromium --version 2>/dev/null || echo chromium) is installed"; return; fi
  command -v apt-get >/dev/null 2>&1 || { log "chromium is missing and there is no apt-get to install it"; exit 1; }
  log "installing Debian's chromium"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >&2
  log "$(/usr/bin/chromium --version 2>/dev/null) installed"
}

case "${1:-}" in
  install) install_chromium ;;
  *) echo "usage: $0 install" >&2; exit 2 ;;
esac
