# Start a throwaway PostgreSQL cluster on loopback for the registry tests (sourced by .ci/run).
if command -v pg_ctlcluster >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  PGDATA=$(mktemp -d /tmp/hedgespec-pg.XXXXXX)
  chown postgres "$PGDATA"
  su postgres -c "$PGBIN/initdb -D $PGDATA -A trust -U postgres" >/dev/null
  su postgres -c "$PGBIN/pg_ctl -D $PGDATA -o '-p 55432 -k /tmp -c listen_addresses=127.0.0.1' -l $PGDATA/log -w start" >/dev/null
  export HEDGESPEC_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:55432/postgres"
  echo "PostgreSQL started for tests at $HEDGESPEC_TEST_POSTGRES_URL"
fi
