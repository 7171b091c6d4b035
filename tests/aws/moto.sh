# Sourced by tests/run and bench/run: defines moto_server, which starts a moto server (S3,
# DynamoDB, Glue, Athena's API; through tests/aws/moto_server.py) on a free 127.0.0.1 port
# from its own venv (cached under ${SKIPPR_MOTO_VENV:-~/.cache/skipprd-moto-venv}), waits
# until it answers, exports SKIPPR_TEST_AWS_ENDPOINT, AWS_ENDPOINT_URL, a region and dummy
# credentials, and leaves its PID in MOTO_PID: the caller stops it (by PID, never by name)
# when it exits.
MOTO_PINS=('moto[server]==5.2.5' 'boto3==1.44.8')
moto_server() {
  local venv="${SKIPPR_MOTO_VENV:-$HOME/.cache/skipprd-moto-venv}"
  local stamp="$venv/skipprd-pins.txt"
  if [[ ! -x "$venv/bin/moto_server" || ! -f "$stamp" || "$(cat "$stamp")" != "${MOTO_PINS[*]}" ]]; then
    echo "== moto venv: $venv" >&2
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${MOTO_PINS[@]}"
    printf '%s' "${MOTO_PINS[*]}" >"$stamp"
  fi
  local port
  port="$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  local log="${TMPDIR:-/tmp}/skipprd-moto-$port.log"
  # moto_server, with DynamoDB's actions one at a time (conditional writes atomic, as in
  # DynamoDB; see the launcher's docstring).
  "$venv/bin/python" "$(dirname "${BASH_SOURCE[0]}")/moto_server.py" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
  MOTO_PID=$!
  for _ in $(seq 1 100); do
    if "$venv/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/', timeout=1)" 2>/dev/null; then
      break
    fi
    sleep 0.1
  done
  export SKIPPR_TEST_AWS_ENDPOINT="http://127.0.0.1:$port"
  export AWS_ENDPOINT_URL="$SKIPPR_TEST_AWS_ENDPOINT"
  export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
  export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
  unset AWS_PROFILE AWS_SESSION_TOKEN
  export AWS_EC2_METADATA_DISABLED=true
  echo "== moto server: $SKIPPR_TEST_AWS_ENDPOINT (pid $MOTO_PID, log $log)" >&2
}
