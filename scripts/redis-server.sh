#!/usr/bin/env bash
# A throwaway redis-server for CI and local test runs.
#
#   eval "$(scripts/redis-server.sh start)"   # exports REDIS_TEST_URL and REDIS_SERVER_DIR
#   scripts/redis-server.sh stop "$REDIS_SERVER_DIR"
#   scripts/redis-server.sh install           # only make sure the binary is there
#
# start installs Debian's redis-server when there is none (apt-get, as root or
# through sudo), picks a free loopback port, and runs Redis there with a temp
# directory, AOF on and fsync'd on every write, no RDB snapshots. It prints the
# export lines on stdout and everything else on stderr. stop ends that server
# and removes its directory.
set -euo pipefail

log() { echo "redis-server.sh: $*" >&2; }
# shellcheck source=scripts/apt.sh
. "$(dirname "$0")/apt.sh"

install_redis() {
  command -v redis-server >/dev/null 2>&1 && return
  apt_install redis-server
  # The package may start a system service on 6379; ours runs on its own port regardless.
}

free_port() {
  node -e "const s = require('net').createServer(); s.listen(0, '127.0.0.1', () => { console.log(s.address().port); s.close(); });"
}

answers_ping() {
  local port=$1 reply=''
  if command -v redis-cli >/dev/null 2>&1; then
    reply=$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null || true)
  else
    reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'PING\r\n' >&3 && timeout 1 head -c 5 <&3) 2>/dev/null || true)
  fi
  [[ "$reply" == *PONG* ]]
}

start() {
  install_redis
  local dir port attempt
  dir=$(mktemp -d "${TMPDIR:-/tmp}/delivery-graph-redis.XXXXXX")
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" \
      --appendonly yes --appendfsync always --save '' \
      --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >&2
    for _ in $(seq 1 100); do
      if answers_ping "$port"; then
        log "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$port (dir $dir)"
        echo "export REDIS_TEST_URL=redis://127.0.0.1:$port"
        echo "export REDIS_SERVER_DIR=$dir"
        return
      fi
      [ -s "$dir/redis.pid" ] && ! kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null && break
      sleep 0.1
    done
    log "no answer on port $port (attempt $attempt); log:"
    cat "$dir/redis.log" >&2 || true
    [ -s "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
    rm -f "$dir/redis.pid"
  done
  rm -rf "$dir"
  log "could not start redis-server"
  exit 1
}

stop() {
  local dir=${1:-${REDIS_SERVER_DIR:-}}
  if [ -z "$dir" ] || [ ! -d "$dir" ]; then log "stop: no server directory given (or REDIS_SERVER_DIR)"; return; fi
  if [ -s "$dir/redis.pid" ]; then
    local pid
    pid=$(cat "$dir/redis.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
  log "stopped"
}

case "${1:-}" in
  install) install_redis ;;
  start) start ;;
  stop) stop "${2:-}" ;;
  *) echo "usage: $0 start | stop [DIR] | install" >&2; exit 2 ;;
esac
