#!/usr/bin/env bash
# The whole test suite, as `make test` and CI run it:
#
#   1. start or find the services (scripts/services.sh), stopped again on exit
#   2. gofmt -l        (any file listed fails)
#   3. go vet ./...     in every module
#   4. staticcheck ./... (pinned, installed into .cache/bin) in every module
#   5. go test -race -count=1 ./... in every module
#
# `scripts/test.sh lint` runs steps 2-4 only, without services.
#
# The modules are those go.work lists (scripts/modules.sh; docs/development.md,
# Modules): `./...` never spans a module boundary, so steps 3-5 run in each
# module's directory with GOWORK=off, each module built from its own go.mod.
# A go.mod that go.work does not list fails the run.
#
# Each step fails fast with its name. Under CI=true a missing service is a
# failure; elsewhere a warning, and the tests that need it skip.
#
# Environment: GO_TEST_FLAGS adds flags to go test (e.g. "-run TestFoo -v");
# GO_TEST_PACKAGES replaces the modules' ./... with the packages named, run
# from the repository root in workspace mode (go.work), so that they may lie
# in any module (e.g. "./transport/... ./cmd/berth").
set -euo pipefail

BERTH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$BERTH_ROOT"
# shellcheck source=scripts/services.sh
source scripts/services.sh
# shellcheck source=scripts/modules.sh
source scripts/modules.sh

STATICCHECK_VERSION="${STATICCHECK_VERSION:-v0.8.2}" # staticcheck 2026.2.2; v0.8.x is the first line whose go.mod targets Go 1.26

step() { printf '\n==> %s\n' "$*" >&2; }

# on_exit stops go test (when a signal cut it short) and the services this
# run started, whatever the exit path.
GO_TEST_PID=""
on_exit() {
	local rc=$? i
	if [[ -n "$GO_TEST_PID" ]] && kill -TERM -- "-$GO_TEST_PID" 2>/dev/null; then
		# go test and its test binaries form their own process group.
		for ((i = 0; i < 50; i++)); do
			kill -0 -- "-$GO_TEST_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL -- "-$GO_TEST_PID" 2>/dev/null || true
	fi
	services_stop
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || die "go not found (expected at /usr/local/go/bin)"

mode="${1:-all}"
case "$mode" in
all | lint) ;;
*) die "usage: scripts/test.sh [lint]" ;;
esac

if [[ "$mode" == all ]]; then
	step "services"
	services_start
fi

# go_files lists the module's Go files (tracked and untracked, not ignored).
go_files() {
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git ls-files -co --exclude-standard -- '*.go' | while IFS= read -r f; do
			if [[ -f "$f" ]]; then printf '%s\n' "$f"; fi
		done
	else
		find . -name '*.go' -not -path './.cache/*' -not -path '*/node_modules/*' -not -path './.git/*'
	fi
}

step "modules"
mapfile -t modules < <(berth_modules)
[[ ${#modules[@]} -gt 0 && "${modules[0]}" == . ]] || die "go.work does not list the root module first"
printf '%s\n' "${modules[@]}" >&2
# in_modules runs its arguments in each module's directory, GOWORK=off.
in_modules() {
	local m
	for m in "${modules[@]}"; do
		(cd "$BERTH_ROOT/$m" && GOWORK=off "$@") || return
	done
}
while IFS= read -r f; do
	d="$(dirname "$f")"
	printf '%s\n' "${modules[@]}" | grep -qxF "$d" || die "$f: a module go.work does not list (add it: go work use $d)"
done < <(git ls-files -co --exclude-standard -- go.mod '*/go.mod' 2>/dev/null || find . -name go.mod -not -path './.cache/*' | sed 's#^\./##')

step "gofmt"
if ! unformatted="$(go_files | xargs -r -d '\n' gofmt -l)"; then
	die "gofmt could not parse the files above"
fi
if [[ -n "$unformatted" ]]; then
	printf '%s\n' "$unformatted" >&2
	die "gofmt: the files above are not formatted; run: gofmt -w <file>"
fi

step "go vet"
in_modules go vet ./... || die "go vet failed"

step "staticcheck $STATICCHECK_VERSION"
staticcheck="$BERTH_CACHE/bin/staticcheck"
if ! "$staticcheck" -version 2>/dev/null | grep -qF "(${STATICCHECK_VERSION#v})"; then
	GOBIN="$BERTH_CACHE/bin" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" ||
		die "could not install staticcheck $STATICCHECK_VERSION"
fi
in_modules "$staticcheck" ./... || die "staticcheck failed"

if [[ "$mode" == lint ]]; then
	exit 0
fi

step "chaos harness (reduced size; prints its ledgers)"
# The reduced-size chaos run goes first, on its own, so its ledgers are
# printed (go test hides a passing package's output) and go test's closing
# lines stay the last lines of the whole run.
export BERTH_CHAOS_LEDGER_DIR="$BERTH_CACHE/chaos"
rm -rf "$BERTH_CHAOS_LEDGER_DIR"
if [[ -z "${GO_TEST_PACKAGES:-}" ]]; then
	rc=0
	GOWORK=off go test -race -count=1 -timeout 10m ./internal/chaos/ || rc=$?
	cat "$BERTH_CHAOS_LEDGER_DIR"/*.txt 2>/dev/null || true
	if [[ $rc != 0 ]]; then
		die "chaos harness failed (exit $rc)"
	fi
fi

step "go test -race"
# -p 2: the machines have two cores; each package's tests get the services to
# themselves as much as possible.
# go test runs in the background, in its own process group, so that a signal
# to this script runs the EXIT trap at once (rather than after the suite) and
# the trap can stop go test with its test binaries.
# go_test NAME DIR GOWORK PACKAGES... runs go test in DIR; a failure is
# recorded in failed and the next module still runs, as one go test over
# every package would.
failed=()
go_test() {
	local name=$1 dir=$2 work=$3 rc=0
	shift 3
	# shellcheck disable=SC2086 # GO_TEST_FLAGS is a word list
	(cd "$dir" && GOWORK="$work" exec setsid go test -race -count=1 -timeout 25m -p 2 ${GO_TEST_FLAGS:-} "$@") &
	GO_TEST_PID=$!
	wait "$GO_TEST_PID" || rc=$?
	GO_TEST_PID=""
	if [[ $rc != 0 ]]; then
		failed+=("$name (exit $rc)")
	fi
}
if [[ -n "${GO_TEST_PACKAGES:-}" ]]; then
	# shellcheck disable=SC2086 # GO_TEST_PACKAGES is a word list
	go_test "GO_TEST_PACKAGES" "$BERTH_ROOT" "$BERTH_ROOT/go.work" $GO_TEST_PACKAGES
else
	for m in "${modules[@]}"; do
		if [[ $m == . ]]; then
			# The chaos harness ran above.
			# shellcheck disable=SC2046 # one package a word
			go_test "the root module" "$BERTH_ROOT" off $(GOWORK=off go list ./... | grep -v '/internal/chaos$')
		else
			go_test "$m" "$BERTH_ROOT/$m" off ./...
		fi
	done
fi
if [[ ${#failed[@]} -gt 0 ]]; then
	die "go test failed: ${failed[*]}"
fi
