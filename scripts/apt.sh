# Sourced by the scripts that install a test dependency from Debian's packages.
#   apt_install PACKAGE   installs it with apt-get, as root or through sudo
# The sourcing script defines log().

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else log "need root (or sudo) to run: $*"; exit 1
  fi
}

apt_install() {
  command -v apt-get >/dev/null 2>&1 || { log "$1 is missing and there is no apt-get to install it"; exit 1; }
  log "installing Debian's $1"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1" >&2
}
