# Sourced by tests/run (and usable from a shell): defines pg_server, which starts a private
# PostgreSQL server for the Postgres source's tests and leaves its PID in PG_PID.
#
# - Debian's `postgresql` package is installed (apt-get) only when no server binaries are found
#   under /usr/lib/postgresql/*/bin (or at SKIPPR_PG_BIN).
# - `initdb` makes a fresh cluster in a temp dir owned by the `postgres` user (the server refuses
#   to run as root), with a scram-sha-256 password for the superuser `postgres`.
# - `pg_ctl` starts it on a free 127.0.0.1 port with `wal_level=logical` (logical replication
#   slots for CDC) and its socket in the temp dir; no system service is touched.
# - Exports PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE (for psql) and SKIPPR_TEST_PG_HOST,
#   SKIPPR_TEST_PG_PORT, SKIPPR_TEST_PG_USER, SKIPPR_TEST_PG_PASSWORD (for the Rust tests),
#   SKIPPR_TEST_PG_CA (the CA of the server's TLS certificate, for `localhost`; the role
#   `skippr_tls`, when a test creates it, is refused without TLS by pg_hba.conf), and
#   PG_PID and PG_DIR. The caller stops the server by PID (`pg_stop`, or `kill -INT "$PG_PID"`),
#   never by name.
pg_bin_dir() {
  if [[ -n "${SKIPPR_PG_BIN:-}" && -x "$SKIPPR_PG_BIN/pg_ctl" ]]; then
    echo "$SKIPPR_PG_BIN"
    return
  fi
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" && -x "$dir/postgres" ]]; then
      echo "$dir"
      return
    fi
  done
}

pg_server() {
  local bin
  bin="$(pg_bin_dir)"
  if [[ -z "$bin" ]]; then
    echo "== installing Debian's postgresql (no server binaries found)" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    bin="$(pg_bin_dir)"
    if [[ -z "$bin" ]]; then
      echo "pg_server: postgresql installed but no initdb under /usr/lib/postgresql/*/bin" >&2
      return 1
    fi
  fi
  local as_pg=()
  if [[ "$(id -u)" == 0 ]]; then
    as_pg=(su postgres -s /bin/sh -c)
  else
    as_pg=(sh -c)
  fi
  PG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/skipprd-pg.XXXXXX")"
  chmod 755 "$PG_DIR"
  local password="skipprd-test-pw"
  printf '%s\n' "$password" >"$PG_DIR/pw"
  if [[ "$(id -u)" == 0 ]]; then
    chown -R postgres "$PG_DIR"
  fi
  "${as_pg[@]}" "'$bin/initdb' -D '$PG_DIR/data' -U postgres --pwfile='$PG_DIR/pw' -A scram-sha-256 >'$PG_DIR/initdb.log' 2>&1" || {
    cat "$PG_DIR/initdb.log" >&2
    return 1
  }
  # TLS: a throwaway CA signs a server certificate for `localhost` (not for 127.0.0.1, so a
  # verify-full test can see a name refused); the role `skippr_tls` may only connect over TLS.
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=skipprd test CA" \
    -keyout "$PG_DIR/ca.key" -out "$PG_DIR/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$PG_DIR/server.key" -out "$PG_DIR/server.csr" >/dev/null 2>&1
  printf 'subjectAltName=DNS:localhost\n' >"$PG_DIR/san.ext"
  openssl x509 -req -in "$PG_DIR/server.csr" -CA "$PG_DIR/ca.crt" -CAkey "$PG_DIR/ca.key" \
    -CAcreateserial -days 2 -extfile "$PG_DIR/san.ext" -out "$PG_DIR/server.crt" >/dev/null 2>&1
  chmod 600 "$PG_DIR/server.key"
  chmod 644 "$PG_DIR/ca.crt" "$PG_DIR/server.crt"
  if [[ "$(id -u)" == 0 ]]; then
    chown postgres "$PG_DIR/server.key" "$PG_DIR/server.crt"
  fi
  {
    printf 'hostnossl all skippr_tls all reject\n'
    cat "$PG_DIR/data/pg_hba.conf"
  } >"$PG_DIR/hba.tmp"
  cat "$PG_DIR/hba.tmp" >"$PG_DIR/data/pg_hba.conf"
  rm -f "$PG_DIR/hba.tmp"
  local port
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  "${as_pg[@]}" "'$bin/pg_ctl' -D '$PG_DIR/data' -l '$PG_DIR/pg.log' -w -t 60 -o \"-p $port -k '$PG_DIR' -c listen_addresses=127.0.0.1 -c wal_level=logical -c max_replication_slots=16 -c max_wal_senders=16 -c fsync=off -c ssl=on -c ssl_cert_file='$PG_DIR/server.crt' -c ssl_key_file='$PG_DIR/server.key'\" start >/dev/null" || {
    cat "$PG_DIR/pg.log" >&2
    return 1
  }
  PG_PID="$(head -1 "$PG_DIR/data/postmaster.pid")"
  export PGHOST=127.0.0.1 PGPORT="$port" PGUSER=postgres PGPASSWORD="$password" PGDATABASE=postgres
  export SKIPPR_TEST_PG_HOST=127.0.0.1 SKIPPR_TEST_PG_PORT="$port"
  export SKIPPR_TEST_PG_USER=postgres SKIPPR_TEST_PG_PASSWORD="$password"
  export SKIPPR_TEST_PG_CA="$PG_DIR/ca.crt"
  export PG_PID PG_DIR
  echo "== postgres server: 127.0.0.1:$port (pid $PG_PID, dir $PG_DIR, $("$bin/postgres" --version))" >&2
}

# Stop the server pg_server started: SIGINT to its postmaster PID (PostgreSQL's "fast"
# shutdown), wait for it to exit, then remove its directory.
pg_stop() {
  if [[ -n "${PG_PID:-}" ]]; then
    kill -INT "$PG_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$PG_PID" 2>/dev/null || break
      sleep 0.1
    done
  fi
  if [[ -n "${PG_DIR:-}" && -d "$PG_DIR" ]]; then
    rm -rf "$PG_DIR"
  fi
}
