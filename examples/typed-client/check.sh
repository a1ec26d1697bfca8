#!/usr/bin/env bash
# The typed-client example, checked end to end (npm run check, and CI):
#   1. npm ci here;
#   2. src/gql/ is what codegen makes from ../../schema.graphql (codegen:check);
#   3. the example type-checks against it (typecheck);
#   4. against a real facade — started from the repo root on a free port, with
#      the embedded sandbox moving a milestone every 100 ms and sending back
#      every delivery it is free to (SANDBOX_RETURN_RATE=1) — the example books
#      a delivery that asks to arrive (sandbox_outcome) and follows it to
#      DROPOFF_COMPLETE.
# Needs the root's node_modules (`npm ci` at the repo root). Runs from anywhere.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"

if [ ! -d "$root/node_modules/tsx" ]; then
  echo "typed-client check: the facade's dependencies are missing: run 'npm ci' in $root first." >&2
  exit 1
fi

echo "== typed-client: npm ci"
npm ci --no-audit --no-fund --loglevel=error

echo "== typed-client: codegen:check"
npm run --silent codegen:check

echo "== typed-client: typecheck"
npm run --silent typecheck
echo "typecheck: ok"

# --- A facade of our own, and the example against it ------------------------
# Both run in process groups of their own (setsid): on any exit — success,
# failure, Ctrl-C, SIGTERM — the trap signals each whole group, so nothing
# they started (tsx starts a child process) outlives this script.

work="$(mktemp -d)"
server_pgid=""
client_pgid=""

# kill_group PGID NAME: SIGTERM, up to 5 s to finish, then SIGKILL.
kill_group() {
  kill -TERM -- "-$1" 2>/dev/null || return 0
  for _ in $(seq 1 50); do
    kill -0 -- "-$1" 2>/dev/null || return 0
    sleep 0.1
  done
  echo "typed-client check: $2 ignored SIGTERM for 5 s; killing it" >&2
  kill -KILL -- "-$1" 2>/dev/null || true
}
cleanup() {
  if [ -n "$client_pgid" ]; then kill_group "$client_pgid" "the example"; fi
  if [ -n "$server_pgid" ]; then kill_group "$server_pgid" "the facade"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

server_log() {
  echo "  --- the facade's log:" >&2
  sed 's/^/  | /' "$work/server.log" >&2
}

port="$(node -e 'const s = require("node:net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });')"
url="http://127.0.0.1:$port"

echo "== typed-client: starting the facade on $url (sandbox upstream, SANDBOX_STEP_MS=100, SANDBOX_RETURN_RATE=1)"
# The empty variables keep a developer's .env at the root from pointing this
# run at a real upstream, Redis or an allowlist (it never overrides a set variable).
(
  cd "$root"
  export PORT="$port" HOST=127.0.0.1 SANDBOX_PORT=0 SANDBOX_STEP_MS=100 SANDBOX_RETURN_RATE=1 \
    DATA_DIR="$work/data" LOG_LEVEL=warn \
    UPSTREAM_URL= REDIS_URL= PERSISTED_OPERATIONS_FILE=
  # What `npm start` at the root runs (tsx src/main.ts), as a single process.
  exec setsid node --import tsx src/main.ts
) >"$work/server.log" 2>&1 </dev/null &
server_pgid=$!

deadline=$((SECONDS + 30))
until node -e 'fetch(process.argv[1]).then((r) => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))' "$url/health"; do
  if ! kill -0 "$server_pgid" 2>/dev/null; then
    echo "typed-client check: the facade exited before answering on $url/health" >&2
    server_log
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "typed-client check: the facade did not answer 200 on $url/health within 30 s" >&2
    server_log
    exit 1
  fi
  sleep 0.2
done

echo "== typed-client: npm start (DG_URL=$url/graphql)"
# In the background with `wait`, so a SIGTERM or Ctrl-C is handled at once.
DG_URL="$url/graphql" DG_TIMEOUT_MS=60000 setsid npm run --silent start </dev/null &
client_pgid=$!
status=0
wait "$client_pgid" || status=$?
if [ "$status" -ne 0 ]; then
  echo "typed-client check: the example failed (exit $status)" >&2
  server_log
  exit 1
fi

trap - EXIT
cleanup
echo "typed-client check: passed"
