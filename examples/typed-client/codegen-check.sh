#!/usr/bin/env bash
# npm run codegen:check — fails when the committed src/gql/ is not what
# `npm run codegen` makes from ../../schema.graphql and the operations in src/
# today. It generates into a temporary folder and compares, so it changes
# nothing and needs no git (it works on a fresh clone after `npm ci`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

fresh="$(mktemp -d)"
trap 'rm -rf "$fresh"' EXIT

if ! CODEGEN_OUT_DIR="$fresh/gql/" npx --no-install graphql-codegen --config codegen.ts --silent >"$fresh/codegen.log" 2>&1; then
  cat "$fresh/codegen.log" >&2
  echo "codegen:check: graphql-codegen failed (above): an operation in src/ may not match ../../schema.graphql." >&2
  exit 1
fi

if ! diff -ru src/gql "$fresh/gql" >"$fresh/diff"; then
  # Paths in the diff: "src/gql" is the committed copy, the temporary one is what codegen makes now.
  head -n 60 "$fresh/diff" >&2
  echo >&2
  echo "codegen:check: src/gql/ is out of date with ../../schema.graphql or the operations in src/." >&2
  echo "  Run 'npm run codegen' in examples/typed-client and commit src/gql/." >&2
  exit 1
fi
echo "codegen:check: src/gql/ matches the schema and the operations"
