#!/usr/bin/env bash
# Entry point of the HedgeSpec Gateway image (also runnable from a checkout, see tests/deploy).
#
#   entrypoint.sh [serve flags...]   migrate the registry, then become `hedgespec serve`
#   entrypoint.sh COMMAND [args...]  run COMMAND instead (e.g. `hedgespec drafter list`, `bash`)
#
# Why migrate here when the gateway also runs `upgrade head` on start: the gateway keeps serving
# when its registry is unreachable (generation does not need it, /ready says why), which is right
# for a running server but wrong for a fresh deployment, where a wrong URL or password should stop
# the container with the database's own error. Retries cover a database that is still starting
# (Kubernetes has no `depends_on`). Replicas starting together are safe: on PostgreSQL the
# migration takes an advisory lock (migrations/env.py), so one migrates and the others see head.
set -euo pipefail

APP_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ $# -gt 0 && "$1" != -* ]]; then
  exec "$@"
fi

# In a container the server must listen on every interface; a flag or the variable overrides.
export HEDGESPEC_HOST="${HEDGESPEC_HOST:-0.0.0.0}"
# Alembic and the gateway must open the same database. Their built-in SQLite defaults differ
# (relative to the working directory vs. to the package), so pin one when none is given.
export HEDGESPEC_DATABASE_URL="${HEDGESPEC_DATABASE_URL:-sqlite:///${APP_DIR}/var/hedgespec.db}"

log() { printf 'entrypoint: %s\n' "$*" >&2; }

# The keys in .env.example are placeholders; starting with them would publish a guessable key.
for name in HEDGESPEC_ADMIN_KEY HEDGESPEC_API_KEYS; do
  if [[ "${!name:-}" == *change-me* ]]; then
    log "$name still holds the placeholder from .env.example; set a real secret (openssl rand -hex 32)"
    exit 64
  fi
done
if [[ -z "${HEDGESPEC_API_KEYS:-}" ]]; then
  log "warning: HEDGESPEC_API_KEYS is empty, so /v1/* accepts requests without a key"
fi

# Never print the password: scheme://user:secret@host -> scheme://user:***@host.
redacted_url="$(printf '%s' "$HEDGESPEC_DATABASE_URL" | sed -E 's#(://[^:/@]*):[^@]*@#\1:***@#')"
attempts="${HEDGESPEC_MIGRATE_ATTEMPTS:-30}"
delay_s="${HEDGESPEC_MIGRATE_DELAY_S:-2}"
for ((attempt = 1; ; attempt++)); do
  log "alembic upgrade head on $redacted_url (attempt $attempt/$attempts)"
  if alembic -c "$APP_DIR/alembic.ini" upgrade head; then
    break
  fi
  if ((attempt >= attempts)); then
    log "the registry database could not be migrated; giving up"
    exit 1
  fi
  sleep "$delay_s"
done

# exec: the shell is replaced by the server, so the SIGTERM of `docker stop` or Kubernetes reaches
# uvicorn itself and in-flight requests drain (HEDGESPEC_DRAIN_TIMEOUT_S) before it exits.
exec hedgespec serve "$@"
