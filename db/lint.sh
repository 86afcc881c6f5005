#!/usr/bin/env bash
# SQL lint: plpgsql_check over every PL/pgSQL function of the schema, in a scratch database
# migrated from scratch. Any error or warning fails. Trigger functions are checked against the
# table of their trigger. Needs SWITCHBOARD_TEST_DATABASE_URL (an admin URL; make lint sets it);
# builds the migrations into a fresh binary unless SWITCHBOARD_BIN names one.
set -euo pipefail
cd "$(dirname "$0")/.."
admin=${SWITCHBOARD_TEST_DATABASE_URL:?admin database URL}
# Keep a password off psql's command line (ps shows command lines to every user): libpq and pgx
# read it from PGPASSWORD instead. (A percent-encoded password is not decoded here.)
if [[ $admin =~ ^(postgres(ql)?://[^:@/]*):([^@/]*)@(.*)$ ]]; then
	export PGPASSWORD=${BASH_REMATCH[3]}
	admin=${BASH_REMATCH[1]}@${BASH_REMATCH[4]}
fi
psql=${PSQL:-psql}
name=switchboard_lint_$$
scratch=$(echo "$admin" | sed -E "s#/[^/?]*(\?|$)#/$name\1#")
"$psql" -qX "$admin" -c "CREATE DATABASE $name" >/dev/null
trap '"$psql" -qX "$admin" -c "DROP DATABASE IF EXISTS $name WITH (FORCE)" >/dev/null' EXIT
sb=${SWITCHBOARD_BIN:-}
if [ -z "$sb" ]; then # never lint the migrations of a stale binary
	sb=bin/switchboard
	go build -o "$sb" ./cmd/switchboard
fi
DATABASE_URL=$scratch "$sb" migrate >/dev/null
report=$("$psql" -qXAt -v ON_ERROR_STOP=1 "$scratch" <<'SQL'
CREATE EXTENSION IF NOT EXISTS plpgsql_check;
SELECT p.oid::regprocedure || ': ' || c.level || ': ' || c.message
       || coalesce(' (line ' || c.lineno || ')', '') || coalesce(' ' || c.detail, '')
  FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
  JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'plpgsql'
 LEFT JOIN LATERAL (SELECT min(t.tgrelid) AS relid FROM pg_trigger t WHERE t.tgfoid = p.oid) tg ON true
 CROSS JOIN LATERAL plpgsql_check_function_tb(p.oid, coalesce(tg.relid, 0), extra_warnings => true) c
 WHERE n.nspname = 'switchboard'
 ORDER BY 1;
SQL
)
count=$("$psql" -qXAt "$scratch" -c "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'switchboard'")
if [ -n "$report" ]; then
	echo "plpgsql_check found problems:"
	echo "$report"
	exit 1
fi
echo "plpgsql_check: $count functions in schema switchboard, no errors or warnings"
