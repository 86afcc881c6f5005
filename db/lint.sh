#!/usr/bin/env bash
# SQL lint: plpgsql_check over every PL/pgSQL function of the schema, in a scratch database
# migrated from scratch. Any error or warning fails. Needs bin/switchboard (make build) and
# SWITCHBOARD_TEST_DATABASE_URL (an admin URL; make lint sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
admin=${SWITCHBOARD_TEST_DATABASE_URL:?admin database URL}
psql=${PSQL:-psql}
name=switchboard_lint_$$
scratch=$(echo "$admin" | sed -E "s#/[^/?]*(\?|$)#/$name\1#")
"$psql" -qX "$admin" -c "CREATE DATABASE $name" >/dev/null
trap '"$psql" -qX "$admin" -c "DROP DATABASE IF EXISTS $name WITH (FORCE)" >/dev/null' EXIT
sb=${SWITCHBOARD_BIN:-bin/switchboard}
[ -x "$sb" ] || go build -o "$sb" ./cmd/switchboard
DATABASE_URL=$scratch "$sb" migrate >/dev/null
report=$("$psql" -qXAt -v ON_ERROR_STOP=1 "$scratch" <<'SQL'
CREATE EXTENSION IF NOT EXISTS plpgsql_check;
SELECT p.oid::regprocedure || ': ' || c.level || ': ' || c.message
       || coalesce(' (line ' || c.lineno || ')', '') || coalesce(' ' || c.detail, '')
  FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
  JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'plpgsql'
 CROSS JOIN LATERAL plpgsql_check_function_tb(p.oid, extra_warnings => true) c
 WHERE n.nspname = 'switchboard' AND p.prorettype <> 'trigger'::regtype
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
