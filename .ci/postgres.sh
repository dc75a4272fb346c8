# Start a throwaway PostgreSQL cluster on loopback for the registry tests (sourced by .ci/run).
# A free port is picked each time, so a cluster left running by anything else never collides.
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  PGDATA=$(mktemp -d /tmp/hedgespec-pg.XXXXXX)
  PGPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  chown postgres "$PGDATA"
  su postgres -c "$PGBIN/initdb -D $PGDATA -A trust -U postgres" >/dev/null
  su postgres -c "$PGBIN/pg_ctl -D $PGDATA -o '-p $PGPORT -k /tmp -c listen_addresses=127.0.0.1' -l $PGDATA/log -w start" >/dev/null
  export HEDGESPEC_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:$PGPORT/postgres"
  echo "PostgreSQL started for tests at $HEDGESPEC_TEST_POSTGRES_URL"
fi
