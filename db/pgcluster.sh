#!/usr/bin/env bash
# A private PostgreSQL 15 cluster for `make run` and `make test` when DATABASE_URL is unset.
#   db/pgcluster.sh start   install what is missing, initdb once, start; prints nothing else
#   db/pgcluster.sh url     the admin URL (database postgres) of the running cluster
#   db/pgcluster.sh stop
# The cluster lives under .pgdata/ (git-ignored). PostgreSQL refuses to run as root, so as root
# the server runs as the OS user postgres. It preloads pg_cron (cron.database_name = switchboard).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGPORT=${SWITCHBOARD_PGPORT:-54329}
PGDIR=${SWITCHBOARD_PGDIR:-$here/.pgdata}
PGUSER_OS=postgres

as_pg() {
	if [ "$(id -u)" = 0 ]; then (cd / && runuser -u "$PGUSER_OS" -- "$@"); else "$@"; fi
}

install_packages() {
	local need=()
	[ -x "$PGBIN/initdb" ] || need+=(postgresql-15 postgresql-contrib-15 postgresql-client-15)
	[ -f /usr/share/postgresql/15/extension/pg_cron.control ] || need+=(postgresql-15-cron)
	[ -f /usr/share/postgresql/15/extension/plpgsql_check.control ] || need+=(postgresql-15-plpgsql-check)
	[ ${#need[@]} -eq 0 ] && return 0
	if [ "$(id -u)" != 0 ]; then
		echo "pgcluster: missing packages ${need[*]}; install them (apt-get install) or set DATABASE_URL" >&2
		exit 1
	fi
	echo "pgcluster: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq "${need[@]}" >&2
}

start() {
	install_packages
	id "$PGUSER_OS" >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql "$PGUSER_OS"
	mkdir -p "$PGDIR"
	if [ "$(id -u)" = 0 ]; then
		chown "$PGUSER_OS" "$PGDIR"
		# The server must reach its data directory through every parent folder. A checkout
		# under a private folder (mode 700) cannot give it that: use a folder under /tmp instead.
		if ! runuser -u "$PGUSER_OS" -- test -w "$PGDIR"; then
			PGDIR=/tmp/switchboard-pg-$(printf '%s' "$here" | sha256sum | cut -c1-12)
			mkdir -p "$PGDIR" && chown "$PGUSER_OS" "$PGDIR" && chmod 700 "$PGDIR"
			echo "pgcluster: $PGUSER_OS cannot reach the checkout; the cluster lives in $PGDIR" >&2
		fi
	fi
	if [ ! -f "$PGDIR/data/PG_VERSION" ]; then
		as_pg "$PGBIN/initdb" -D "$PGDIR/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$PGDIR/initdb.log" 2>&1 ||
			{ cat "$PGDIR/initdb.log" >&2; exit 1; }
		cat >>"$PGDIR/data/postgresql.conf" <<CONF
# switchboard private cluster
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$PGDIR'
max_connections = 300
shared_buffers = 256MB
shared_preload_libraries = 'pg_cron'
cron.database_name = 'switchboard'
log_min_messages = warning
CONF
	fi
	if ! as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" status >/dev/null 2>&1; then
		as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 start >/dev/null ||
			{ tail -n 30 "$PGDIR/server.log" >&2; exit 1; }
	fi
	# The database pg_cron lives in; make run uses it too.
	if ! "$PGBIN/psql" -qAt "$(url)" -c "SELECT 1 FROM pg_database WHERE datname = 'switchboard'" | grep -q 1; then
		"$PGBIN/psql" -q "$(url)" -c "CREATE DATABASE switchboard" >/dev/null
	fi
}

url() { echo "postgres://postgres@127.0.0.1:$PGPORT/postgres?sslmode=disable"; }

stop() {
	for dir in "$PGDIR" /tmp/switchboard-pg-$(printf '%s' "$here" | sha256sum | cut -c1-12); do
		[ -f "$dir/data/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m fast stop || true
	done
}

case "${1:-}" in
start) start ;;
url) url ;;
stop) stop ;;
*) echo "usage: $0 start|url|stop" >&2; exit 2 ;;
esac
