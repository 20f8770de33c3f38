#!/usr/bin/env bash
# The forge's workflows against GitHub's workflow schema, with @action-validator/cli (a prebuilt
# binary from npm). Its schema predates the `attestations` permission that the attestation
# actions need, so that one line is left out of the copy it checks; everything else is checked.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for workflow in .github/workflows/*.yml; do
  grep -v -E '^ +attestations: write$' "$workflow" > "$scratch/$(basename "$workflow")"
  npx action-validator "$scratch/$(basename "$workflow")"
  echo "$workflow: valid"
done
