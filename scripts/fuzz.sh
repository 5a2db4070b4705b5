#!/usr/bin/env bash
# Runs every Fuzz target in every module (scripts/modules.sh) for FUZZTIME
# each (default 30s). go test -fuzz takes one target in one package at a time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fuzztime="${FUZZTIME:-30s}"
root="$(pwd)"
export GOWORK=off # each module from its own go.mod
found=0
for mod in $(bash scripts/modules.sh); do
	cd "$root/$mod"
	for pkg in $(go list ./...); do
		for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
			found=1
			printf '\n==> %s %s (%s)\n' "$pkg" "$target" "$fuzztime" >&2
			go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
		done
	done
done
if [[ $found == 0 ]]; then
	printf 'no fuzz targets yet\n' >&2
fi
