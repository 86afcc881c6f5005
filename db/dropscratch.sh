#!/usr/bin/env bash
# Drops what the tests leave on the cluster: test template databases (switchboard_tpl_*) and
# per-test databases (sbtest_*) of runs that were killed before their cleanup.
#   db/dropscratch.sh ADMIN_URL
set -euo pipefail
admin=${1:?admin database URL}
psql=${PSQL:-psql}
for name in $("$psql" -qXAt "$admin" -c "SELECT datname FROM pg_database WHERE datname LIKE 'switchboard\_tpl\_%' OR datname LIKE 'sbtest\_%'"); do
	"$psql" -qX "$admin" -c "DROP DATABASE IF EXISTS $name WITH (FORCE)" >/dev/null
done
