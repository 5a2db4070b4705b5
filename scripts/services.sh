#!/usr/bin/env bash
# Starts or finds the services Berth's integration tests need and exports
# where they are:
#
#   BERTH_TEST_POSTGRES_URL  PostgreSQL (database "test")
#   BERTH_TEST_SQS_ENDPOINT  the fauxqs SQS emulator (npm fauxqs@1.9.2)
#   AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY  (defaults, if unset)
#   BERTH_TEST_PG_STAT_STATEMENTS  1 when pg_stat_statements is usable
#
# and installs Debian's chromium (/usr/bin/chromium) for the console's
# browser tests when it is missing and this runs as root.
#
# Sourced by scripts/test.sh, which calls services_start and stops what was
# started with services_stop on exit. Run directly for local development:
#
#   scripts/services.sh up     start/find services, write .cache/test.env
#   scripts/services.sh down   stop what "up" started
#
# A variable that is already set is used as is: nothing is started for it.
# Under CI=true a service that cannot be had is an error; elsewhere it is a
# warning and the tests that need it skip.
#
# BERTH_PG_FORCE_THROWAWAY=1 skips the shared server and creates a throwaway
# cluster, to exercise that path on a machine that has a server.

BERTH_ROOT="${BERTH_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
BERTH_CACHE="$BERTH_ROOT/.cache"
FAUXQS_VERSION=1.9.2
FAUXQS_DIR="$BERTH_CACHE/fauxqs"
FAUXQS_SRC="$BERTH_ROOT/scripts/fauxqs"
SERVICES_STATE="$BERTH_CACHE/services.state"
DEFAULT_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

# What this process started, for services_stop.
STARTED_FAUXQS_PID=""
STARTED_PG_DIR=""     # throwaway cluster: its temp dir
STARTED_PG_CLUSTER="" # system cluster started with pg_ctlcluster: "VERSION NAME"

log() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

is_ci() {
	case "${CI:-}" in
	1 | t | T | true | TRUE | True) return 0 ;;
	*) return 1 ;;
	esac
}

# missing_service REASON: fail under CI, warn elsewhere.
missing_service() {
	if is_ci; then
		die "$1 (CI=true: every service except SQL Server is required)"
	fi
	warn "$1; the tests that need it will skip"
}

# free_port prints a TCP port that is free on 127.0.0.1.
free_port() {
	node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})' 2>/dev/null ||
		python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

# ---------------------------------------------------------------- SQS -------

# fauxqs_install installs the pinned emulator into .cache/fauxqs with npm ci
# from scripts/fauxqs/package-lock.json; it does nothing when already there.
fauxqs_install() {
	local want have
	want="fauxqs@$FAUXQS_VERSION $(sha256sum "$FAUXQS_SRC/package-lock.json" | cut -d' ' -f1)"
	have="$(cat "$FAUXQS_DIR/.berth-installed" 2>/dev/null || true)"
	if [[ "$have" == "$want" && -f "$FAUXQS_DIR/node_modules/fauxqs/package.json" ]]; then
		return 0
	fi
	log "installing fauxqs@$FAUXQS_VERSION into ${FAUXQS_DIR#"$BERTH_ROOT"/}"
	rm -rf "$FAUXQS_DIR"
	mkdir -p "$FAUXQS_DIR"
	cp "$FAUXQS_SRC/package.json" "$FAUXQS_SRC/package-lock.json" "$FAUXQS_DIR/"
	local try
	for try in 1 2 3; do
		if (cd "$FAUXQS_DIR" && npm ci --no-audit --no-fund --loglevel=error --engine-strict=false); then
			break
		fi
		[[ $try == 3 ]] && return 1
		warn "npm ci failed (try $try of 3), retrying"
		sleep $((try * 5))
	done
	have="$(node -p "require('$FAUXQS_DIR/node_modules/fauxqs/package.json').version")"
	if [[ "$have" != "$FAUXQS_VERSION" ]]; then
		warn "installed fauxqs is $have, want $FAUXQS_VERSION"
		return 1
	fi
	printf '%s\n' "$want" >"$FAUXQS_DIR/.berth-installed"
}

# sqs_call ENDPOINT ACTION [BODY]: one SQS JSON-protocol request; prints the
# response body, fails on a non-2xx status.
sqs_call() {
	local body="${3:-}"
	if [[ -z "$body" ]]; then
		body='{}'
	fi
	curl -fsS --max-time 5 -X POST "$1/" \
		-H "X-Amz-Target: AmazonSQS.$2" \
		-H 'Content-Type: application/x-amz-json-1.0' \
		-d "$body"
}

# fauxqs_start [detach]: starts the emulator on a free loopback port and
# waits until it answers /health and ListQueues.
fauxqs_start() {
	local detach="${1:-}" port_file="$BERTH_CACHE/fauxqs.port" log_file="$BERTH_CACHE/fauxqs.log"
	rm -f "$port_file"
	log "starting the SQS emulator (log: ${log_file#"$BERTH_ROOT"/})"
	if [[ -n "$detach" ]]; then
		FAUXQS_PORT=0 FAUXQS_PORT_FILE="$port_file" \
			setsid nohup node "$FAUXQS_SRC/server.mjs" "$FAUXQS_DIR" >"$log_file" 2>&1 </dev/null &
	else
		FAUXQS_PORT=0 FAUXQS_PORT_FILE="$port_file" FAUXQS_PARENT_PID=$$ \
			node "$FAUXQS_SRC/server.mjs" "$FAUXQS_DIR" >"$log_file" 2>&1 </dev/null &
	fi
	STARTED_FAUXQS_PID=$!

	local i port="" endpoint
	for ((i = 0; i < 300; i++)); do # 30 s
		if ! kill -0 "$STARTED_FAUXQS_PID" 2>/dev/null; then
			STARTED_FAUXQS_PID=""
			printf '%s\n' '--- fauxqs log (tail) ---' >&2
			tail -n 30 "$log_file" >&2 || true
			return 1
		fi
		if [[ -z "$port" && -s "$port_file" ]]; then
			port="$(cat "$port_file")"
		fi
		if [[ -n "$port" ]] && curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$port/health" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	endpoint="http://127.0.0.1:$port"
	if [[ -z "$port" ]] || ! sqs_call "$endpoint" ListQueues >/dev/null; then
		warn "the SQS emulator did not answer /health and ListQueues within 30s"
		printf '%s\n' '--- fauxqs log (tail) ---' >&2
		tail -n 30 "$log_file" >&2 || true
		return 1
	fi
	export BERTH_TEST_SQS_ENDPOINT="$endpoint"
	log "SQS emulator fauxqs@$FAUXQS_VERSION at $endpoint (pid $STARTED_FAUXQS_PID)"
}

sqs_setup() {
	local detach="${1:-}"
	export AWS_REGION="${AWS_REGION:-us-east-1}"
	export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}"
	export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
	if [[ -n "${BERTH_TEST_SQS_ENDPOINT:-}" ]]; then
		if sqs_call "$BERTH_TEST_SQS_ENDPOINT" ListQueues >/dev/null 2>&1; then
			log "SQS: using BERTH_TEST_SQS_ENDPOINT=$BERTH_TEST_SQS_ENDPOINT"
		else
			missing_service "BERTH_TEST_SQS_ENDPOINT=$BERTH_TEST_SQS_ENDPOINT does not answer ListQueues"
		fi
		return 0
	fi
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		missing_service "node and npm are needed to run the SQS emulator"
		return 0
	fi
	if ! command -v curl >/dev/null; then
		missing_service "curl is needed to check the SQS emulator"
		return 0
	fi
	mkdir -p "$BERTH_CACHE"
	if ! fauxqs_install; then
		missing_service "could not install fauxqs@$FAUXQS_VERSION with npm"
		return 0
	fi
	if ! fauxqs_start "$detach"; then
		fauxqs_stop
		missing_service "could not start the SQS emulator"
		return 0
	fi
}

fauxqs_stop() {
	local pid="$STARTED_FAUXQS_PID" i
	STARTED_FAUXQS_PID=""
	[[ -n "$pid" ]] || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

# ----------------------------------------------------------- PostgreSQL -----

# pg_bin TOOL prints the path of a PostgreSQL server tool (newest version).
pg_bin() {
	local d
	for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
		if [[ -x "$d/$1" ]]; then
			printf '%s\n' "$d/$1"
			return 0
		fi
	done
	command -v "$1"
}

# as_postgres CMD...: runs CMD as the postgres OS user when root (initdb and
# postgres refuse to run as root), as the current user otherwise.
as_postgres() {
	if [[ $EUID -ne 0 ]]; then
		"$@"
	elif command -v runuser >/dev/null; then
		(cd / && runuser -u postgres -- "$@")
	else
		(cd / && su -s /bin/sh postgres -c "$(printf '%q ' "$@")")
	fi
}

# pg_ready HOST PORT
pg_ready() {
	local isready
	isready="$(command -v pg_isready || pg_bin pg_isready)" || return 1
	"$isready" -q -h "$1" -p "$2" -t 3
}

# pg_ensure_test_db HOST PORT: creates database "test" if missing.
pg_ensure_test_db() {
	local exists
	exists="$(psql -h "$1" -p "$2" -U postgres -d postgres -XAtqc "SELECT 1 FROM pg_database WHERE datname = 'test'")" || return 1
	if [[ "$exists" != 1 ]]; then
		log "creating database test on $1:$2"
		psql -h "$1" -p "$2" -U postgres -d postgres -Xqc 'CREATE DATABASE test' || return 1
	fi
}

# pg_throwaway: a fresh cluster in a temp dir on a free port, owned by this
# process and removed by pg_stop.
pg_throwaway() {
	local initdb pg_ctl port dir
	initdb="$(pg_bin initdb)" || return 1
	pg_ctl="$(pg_bin pg_ctl)" || return 1
	if [[ $EUID -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
		warn "running as root but there is no postgres OS user to run initdb as"
		return 1
	fi
	dir="$(mktemp -d /tmp/berth-pg.XXXXXX)"
	STARTED_PG_DIR="$dir"
	if [[ $EUID -eq 0 ]]; then
		chown postgres: "$dir"
	fi
	port="$(free_port)" || return 1
	log "creating a throwaway PostgreSQL cluster in $dir on port $port"
	as_postgres "$initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 || {
		tail -n 20 "$dir/initdb.log" >&2
		return 1
	}
	local preload=""
	if [[ -f "$("$(pg_bin pg_config)" --pkglibdir 2>/dev/null)/pg_stat_statements.so" ]]; then
		preload="-c shared_preload_libraries=pg_stat_statements"
	fi
	as_postgres "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
		-o "-c port=$port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir -c max_connections=100 -c fsync=off -c synchronous_commit=off -c full_page_writes=off $preload" \
		start >/dev/null || {
		tail -n 20 "$dir/server.log" >&2
		return 1
	}
	pg_ensure_test_db 127.0.0.1 "$port" || return 1
	export BERTH_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/test?sslmode=disable"
}

# pg_stat_statements_setup: enables the extension in the test database when
# the server preloads it (never restarts a server to get it).
pg_stat_statements_setup() {
	local preload
	export BERTH_TEST_PG_STAT_STATEMENTS=0
	command -v psql >/dev/null || return 0
	preload="$(psql "$BERTH_TEST_POSTGRES_URL" -XAtqc 'SHOW shared_preload_libraries' 2>/dev/null)" || return 0
	if [[ "$preload" == *pg_stat_statements* ]] &&
		psql "$BERTH_TEST_POSTGRES_URL" -Xqc 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' >/dev/null 2>&1; then
		export BERTH_TEST_PG_STAT_STATEMENTS=1
	else
		log "pg_stat_statements is not preloaded by this server; the SQL benchmark will run without it"
	fi
}

postgres_setup() {
	local detach="${1:-}"
	if [[ -n "${BERTH_TEST_POSTGRES_URL:-}" ]]; then
		if command -v psql >/dev/null && ! psql "$BERTH_TEST_POSTGRES_URL" -XAtqc 'SELECT 1' >/dev/null; then
			missing_service "BERTH_TEST_POSTGRES_URL is set but does not accept connections"
			return 0
		fi
		log "PostgreSQL: using BERTH_TEST_POSTGRES_URL"
		pg_stat_statements_setup
		return 0
	fi
	if ! command -v psql >/dev/null; then
		missing_service "PostgreSQL: psql not found (apt-get install postgresql)"
		return 0
	fi

	if [[ -z "${BERTH_PG_FORCE_THROWAWAY:-}" ]]; then
		if ! pg_ready 127.0.0.1 5432 && command -v pg_ctlcluster >/dev/null && [[ -d /etc/postgresql ]]; then
			local version
			version="$(printf '%s\n' /etc/postgresql/*/main | sort -V | tail -n 1)"
			version="${version#/etc/postgresql/}"
			version="${version%/main}"
			if [[ -d "/etc/postgresql/$version/main" ]]; then
				log "starting the installed PostgreSQL $version cluster"
				if pg_ctlcluster --skip-systemctl-redirect "$version" main start; then
					if [[ -z "$detach" ]]; then
						STARTED_PG_CLUSTER="$version main"
					fi
					local i
					for ((i = 0; i < 30; i++)); do
						pg_ready 127.0.0.1 5432 && break
						sleep 1
					done
				fi
			fi
		fi
		if pg_ready 127.0.0.1 5432; then
			if pg_ensure_test_db 127.0.0.1 5432; then
				export BERTH_TEST_POSTGRES_URL="$DEFAULT_POSTGRES_URL"
				log "PostgreSQL at 127.0.0.1:5432 (database test)"
				pg_stat_statements_setup
				return 0
			fi
			warn "PostgreSQL at 127.0.0.1:5432 answers but database test is not usable as user postgres"
		fi
	fi

	if pg_throwaway; then
		log "PostgreSQL throwaway cluster at $BERTH_TEST_POSTGRES_URL"
		pg_stat_statements_setup
		return 0
	fi
	pg_stop
	missing_service "no PostgreSQL: nothing answers at 127.0.0.1:5432 and no cluster could be started"
}

pg_stop() {
	if [[ -n "$STARTED_PG_DIR" ]]; then
		local dir="$STARTED_PG_DIR"
		STARTED_PG_DIR=""
		if [[ -f "$dir/data/postmaster.pid" ]]; then
			as_postgres "$(pg_bin pg_ctl)" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
				warn "could not stop the throwaway PostgreSQL cluster in $dir"
		fi
		rm -rf "$dir"
	fi
	if [[ -n "$STARTED_PG_CLUSTER" ]]; then
		local c="$STARTED_PG_CLUSTER"
		STARTED_PG_CLUSTER=""
		# shellcheck disable=SC2086 # "VERSION NAME"
		pg_ctlcluster --skip-systemctl-redirect $c stop >/dev/null 2>&1 || true
	fi
}

# ------------------------------------------------------------ browser -------

CHROMIUM=/usr/bin/chromium

# chromium_setup installs Debian's chromium for console's browser
# tests (driven with chromedp) when it is missing: as root with apt-get,
# else it is a missing service.
chromium_setup() {
	if [[ -x "$CHROMIUM" ]]; then
		return 0
	fi
	if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
		log "installing chromium for the console's browser tests (apt-get install chromium)"
		if DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; then
			return 0
		fi
	fi
	missing_service "no browser at $CHROMIUM for the console's browser tests (as root: apt-get install chromium)"
}

# -------------------------------------------------------------- entry -------

# services_start [detach]: start or find every service and export its
# location. With detach the services outlive this shell (make services-up).
services_start() {
	postgres_setup "${1:-}"
	sqs_setup "${1:-}"
	chromium_setup
}

# services_stop stops what services_start started in this shell. Safe to
# call more than once.
services_stop() {
	fauxqs_stop
	pg_stop
}

# write_env FILE: the exported service locations as a file to `source`.
write_env() {
	local v
	{
		printf '# Written by scripts/services.sh up; source it to run go test by hand.\n'
		for v in BERTH_TEST_POSTGRES_URL BERTH_TEST_SQS_ENDPOINT BERTH_TEST_SQLSERVER_URL BERTH_TEST_PG_STAT_STATEMENTS \
			AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; do
			if [[ -n "${!v:-}" ]]; then
				printf 'export %s=%q\n' "$v" "${!v}"
			fi
		done
	} >"$1"
}

services_main() {
	set -euo pipefail
	mkdir -p "$BERTH_CACHE"
	case "${1:-}" in
	up)
		if [[ -f "$SERVICES_STATE" ]]; then
			services_main down
		fi
		services_start detach
		# The throwaway cluster is the only thing "up" must remember besides
		# the emulator; a system cluster started here is left running.
		printf 'STARTED_FAUXQS_PID=%q\nSTARTED_PG_DIR=%q\n' "$STARTED_FAUXQS_PID" "$STARTED_PG_DIR" >"$SERVICES_STATE"
		write_env "$BERTH_CACHE/test.env"
		log "wrote .cache/test.env; run: source .cache/test.env && go test -race ./..."
		;;
	down)
		if [[ -f "$SERVICES_STATE" ]]; then
			# shellcheck disable=SC1090
			source "$SERVICES_STATE"
			services_stop
			rm -f "$SERVICES_STATE" "$BERTH_CACHE/test.env"
			log "services stopped"
		else
			log "nothing to stop"
		fi
		;;
	*)
		printf 'usage: %s up|down\n' "$0" >&2
		return 2
		;;
	esac
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	services_main "$@"
fi
