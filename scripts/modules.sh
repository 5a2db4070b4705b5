#!/usr/bin/env bash
# Berth's Go modules, as go.work lists them (docs/development.md, Modules):
# the library at the root and the nested modules of the tools around it.
#
#   bash scripts/modules.sh              prints each module's directory
#   bash scripts/modules.sh CMD ARGS...  runs CMD ARGS in each module's
#                                        directory, with GOWORK=off, and
#                                        stops at the first that fails
#
# `./...` in a module, even in workspace mode, matches only that module's
# packages, so whatever must cover the whole tree (vet, staticcheck, go test,
# benchmarks, fuzzing) goes through here. GOWORK=off builds each module
# from its own go.mod and go.sum: the library is tested with the versions
# it declares, not the workspace's highest.
#
# Sourced (by scripts/test.sh), it defines berth_modules only.
set -euo pipefail

# berth_modules prints the directory of each module in go.work, relative to
# the repository root, the root module (".") first.
berth_modules() {
	local root
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	(cd "$root" && GOWORK="$root/go.work" GOFLAGS= go work edit -json) |
		sed -n 's/^[[:space:]]*"DiskPath": "\(.*\)"[,]*$/\1/p' | sed 's#^\./##; s#^$#.#'
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	mapfile -t modules < <(berth_modules)
	if [[ $# == 0 ]]; then
		printf '%s\n' "${modules[@]}"
		exit 0
	fi
	for m in "${modules[@]}"; do
		printf '\n==> %s: %s\n' "$m" "$*" >&2
		(cd "$root/$m" && GOWORK=off "$@")
	done
fi
