#!/usr/bin/env bash
# A private PostgreSQL 15 cluster for `make run` and `make test` when DATABASE_URL is unset.
#   db/pgcluster.sh start   install what is missing, initdb once, start; prints nothing else
#   db/pgcluster.sh url     the admin URL (database postgres, with the password) of the cluster
#   db/pgcluster.sh dir     the folder the cluster lives in
#   db/pgcluster.sh stop
# The cluster lives under .pgdata/ (git-ignored) and listens on 127.0.0.1:$SWITCHBOARD_PGPORT
# (default 54329; a second checkout on the same machine needs a port of its own). PostgreSQL
# refuses to run as root, so as root the server runs as the OS user postgres. It preloads pg_cron
# (cron.database_name = switchboard) and pg_stat_statements (make bench reads where the database
# time goes; nothing else needs it).
#
# Nobody else on the machine gets in: every connection (socket or TCP, loopback only) needs the
# password (scram-sha-256; no trust line), which is generated once into <dir>/password (mode
# 600, readable only by the cluster's owner and root); the folder holding the socket is mode 700.
# A cluster made by an older version of this script with trust authentication is converted the
# next time it starts: it gets a password, the new pg_hba.conf, and a restart.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGPORT=${SWITCHBOARD_PGPORT:-54329}
PGDIR=${SWITCHBOARD_PGDIR:-$here/.pgdata}
PGUSER_OS=postgres
fallback=/tmp/switchboard-pg-$(printf '%s' "$here" | sha256sum | cut -c1-12)

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

# The folder of an existing cluster: the checkout's, or the /tmp one start() falls back to.
cluster_dir() {
	local dir
	for dir in "$PGDIR" "$fallback"; do
		if [ -f "$dir/data/PG_VERSION" ]; then
			echo "$dir"
			return
		fi
	done
	echo "$PGDIR"
}

# The password, generated once (48 hex digits: URL-safe), owned by the cluster's OS user.
ensure_password() {
	[ -s "$PGDIR/password" ] && return 0
	(umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$PGDIR/password.new")
	mv "$PGDIR/password.new" "$PGDIR/password"
	if [ "$(id -u)" = 0 ]; then chown "$PGUSER_OS" "$PGDIR/password"; fi
}

write_hba() {
	as_pg tee "$PGDIR/data/pg_hba.conf" >/dev/null <<'HBA'
# switchboard private cluster (db/pgcluster.sh): a password for everyone, loopback only.
# TYPE  DATABASE     USER  ADDRESS        METHOD
local   all          all                  scram-sha-256
host    all          all   127.0.0.1/32   scram-sha-256
host    all          all   ::1/128        scram-sha-256
local   replication  all                  scram-sha-256
host    replication  all   127.0.0.1/32   scram-sha-256
host    replication  all   ::1/128        scram-sha-256
HBA
}

running() { as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" status >/dev/null 2>&1; }

# Whether anything accepts TCP connections on 127.0.0.1:$1.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The port is held by someone else: say so, with a free port to use instead. Otherwise the
# postmaster's "could not bind" is followed by make run's "password authentication failed",
# from the other cluster, which sends a newcomer to the wrong place.
port_taken() {
	local what="another program" rc=0 free=$((PGPORT + 1))
	"$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT" -t 3 || rc=$?
	if [ "$rc" -lt 2 ]; then what="another PostgreSQL (another checkout's private cluster, or the system's)"; fi
	while listening "$free"; do free=$((free + 1)); done
	cat >&2 <<MSG
pgcluster: port $PGPORT on 127.0.0.1 is taken by $what,
not by this checkout's cluster ($PGDIR). Give this checkout a port of its own, e.g.
    export SWITCHBOARD_PGPORT=$free
and run make run / make test again; or stop the other one (db/pgcluster.sh stop in its checkout).
MSG
	exit 1
}

pg_start() {
	! listening "$PGPORT" || port_taken
	# -p: the port asked for now, whatever the one written at initdb.
	as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -o "-p $PGPORT" -w -t 60 start >/dev/null || {
		if tail -n 30 "$PGDIR/server.log" | grep -q 'could not bind.*Address already in use'; then port_taken; fi
		tail -n 30 "$PGDIR/server.log" >&2
		exit 1
	}
}

# A cluster from before passwords: set the password while trust still lets us in, then switch
# pg_hba.conf and the socket permissions over and restart.
convert_trust_cluster() {
	grep -Eq '^[[:space:]]*[^#[:space:]].*[[:space:]]trust([[:space:]]|$)' "$PGDIR/data/pg_hba.conf" || return 0
	echo "pgcluster: switching $PGDIR from trust to scram-sha-256 passwords" >&2
	running || pg_start
	# psql reads the password from the file itself: never on a command line (ps shows those).
	as_pg "$PGBIN/psql" -qX -v ON_ERROR_STOP=1 "postgres://postgres@127.0.0.1:$PGPORT/postgres?sslmode=disable" \
		>/dev/null <<SQL
\\set pw \`cat '$PGDIR/password'\`
SET password_encryption = 'scram-sha-256';
ALTER ROLE postgres PASSWORD :'pw';
SQL
	write_hba
	as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" -m fast -w stop >/dev/null
}

# Settings added since a cluster was made; each needs a restart.
#   unix_socket_permissions: only the owner may use the socket.
#   cron.use_background_workers: pg_cron runs jobs in background workers; by default it
#     connects over libpq, which a password-only pg_hba.conf refuses ("connection failed").
#   shared_preload_libraries gains pg_stat_statements (the bench's statement statistics).
ensure_conf() {
	local conf=$PGDIR/data/postgresql.conf line added=
	for line in "unix_socket_permissions = 0700" "cron.use_background_workers = on"; do
		if ! grep -q "^${line%% =*} " "$conf"; then
			echo "$line" | as_pg tee -a "$conf" >/dev/null
			added=1
		fi
	done
	# pg_stat_statements joined pg_cron in shared_preload_libraries later: add it to the line.
	if grep -q "^shared_preload_libraries = 'pg_cron'$" "$conf"; then
		as_pg sed -i "s/^shared_preload_libraries = 'pg_cron'$/shared_preload_libraries = 'pg_cron,pg_stat_statements'/" "$conf"
		added=1
	fi
	if [ -n "$added" ] && running; then
		as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" -m fast -w stop >/dev/null
	fi
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
			PGDIR=$fallback
			mkdir -p "$PGDIR" && chown "$PGUSER_OS" "$PGDIR"
			echo "pgcluster: $PGUSER_OS cannot reach the checkout; the cluster lives in $PGDIR" >&2
		fi
	fi
	chmod 700 "$PGDIR" # it holds the socket and the password
	ensure_password
	if [ ! -f "$PGDIR/data/PG_VERSION" ]; then
		as_pg "$PGBIN/initdb" -D "$PGDIR/data" -U postgres --auth=scram-sha-256 --pwfile="$PGDIR/password" \
			-E UTF8 --locale=C.UTF-8 >"$PGDIR/initdb.log" 2>&1 ||
			{ cat "$PGDIR/initdb.log" >&2; exit 1; }
		cat <<CONF | as_pg tee -a "$PGDIR/data/postgresql.conf" >/dev/null
# switchboard private cluster
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$PGDIR'
unix_socket_permissions = 0700
password_encryption = 'scram-sha-256'
max_connections = 300
shared_buffers = 256MB
shared_preload_libraries = 'pg_cron,pg_stat_statements'
cron.database_name = 'switchboard'
cron.use_background_workers = on
log_min_messages = warning
CONF
		write_hba
	fi
	convert_trust_cluster
	ensure_conf
	running || pg_start
	# The database pg_cron lives in; make run uses it too.
	if ! admin_psql -qAt -c "SELECT 1 FROM pg_database WHERE datname = 'switchboard'" | grep -q 1; then
		admin_psql -q -c "CREATE DATABASE switchboard" >/dev/null
	fi
}

# psql as the admin, the password in its environment rather than on its command line.
admin_psql() {
	PGPASSWORD=$(cat "$PGDIR/password") "$PGBIN/psql" -X "postgres://postgres@127.0.0.1:$PGPORT/postgres?sslmode=disable" "$@"
}

url() {
	local dir
	dir=$(cluster_dir)
	if [ ! -s "$dir/password" ]; then
		echo "pgcluster: no password in $dir: run db/pgcluster.sh start" >&2
		exit 1
	fi
	echo "postgres://postgres:$(cat "$dir/password")@127.0.0.1:$PGPORT/postgres?sslmode=disable"
}

stop() {
	for dir in "$PGDIR" "$fallback"; do
		[ -f "$dir/data/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m fast stop || true
	done
}

case "${1:-}" in
start) start ;;
url) url ;;
dir) cluster_dir ;;
stop) stop ;;
*) echo "usage: $0 start|url|dir|stop" >&2; exit 2 ;;
esac
