#!/usr/bin/env bash
# Runs py/test_tls.py against a real RabbitMQ (shared/tools/rabbitmq.sh) configured with the
# same kind of certificates (tls_certs.py), once per TLS mode, to check that what the tests
# assert of Warren is what RabbitMQ does:
#   tests/interop/tls_rabbitmq.sh [AMQP_PORT [AMQPS_PORT]]     (defaults 5775 5759)
# Modes: no peer verification; verify_peer with EXTERNAL from the common name; verify_peer
# with EXTERNAL from the distinguished name (user created under its DN); fail_if_no_peer_cert.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
port=${1:-5775}
tls_port=${2:-5759}
rabbit=${RABBITMQ_SH:-/work/shared/tools/rabbitmq.sh}
base="/tmp/rabbitmq-${port}"
python="$here/.venv/bin/python"
certs="$base/certs"
status=0

mkdir -p "$base"
rm -rf "$certs"
"$python" "$here/py/tls_certs.py" "$certs" >/dev/null
echo '[rabbitmq_auth_mechanism_ssl].' >"$base/enabled_plugins"

run_mode() { # VERIFY LOGIN_FROM PYTEST_ARGS...
  local verify=$1 login_from=$2; shift 2
  {
    echo "listeners.ssl.default = $tls_port"
    echo "ssl_options.cacertfile = $certs/ca.pem"
    echo "ssl_options.certfile = $certs/server.pem"
    echo "ssl_options.keyfile = $certs/server.key"
    case "$verify" in
      none) echo "ssl_options.verify = verify_none" ;;
      verify_peer) echo "ssl_options.verify = verify_peer"
                   echo "ssl_options.fail_if_no_peer_cert = false" ;;
      fail_if_no_peer_cert) echo "ssl_options.verify = verify_peer"
                            echo "ssl_options.fail_if_no_peer_cert = true" ;;
    esac
    echo "auth_mechanisms.1 = PLAIN"
    echo "auth_mechanisms.2 = AMQPLAIN"
    echo "auth_mechanisms.3 = EXTERNAL"
    echo "ssl_cert_login_from = $login_from"
  } >"$base/rabbitmq.conf"
  RABBITMQ_CONFIG_FILE="$base/rabbitmq.conf" "$rabbit" start "$port" >/dev/null
  # The users the EXTERNAL tests log in as.
  "$rabbit" ctl "$port" add_user tls-client unused-password >/dev/null 2>&1 || true
  "$rabbit" ctl "$port" set_permissions tls-client '.*' '.*' '.*' >/dev/null
  "$rabbit" ctl "$port" add_user "CN=tls-client,O=Warren Tests,C=GB" unused-password >/dev/null 2>&1 || true
  "$rabbit" ctl "$port" set_permissions "CN=tls-client,O=Warren Tests,C=GB" '.*' '.*' '.*' >/dev/null
  local mode_env=$verify
  [ "$verify" = none ] && mode_env=""
  echo "tls_rabbitmq: verify=$verify ssl_cert_login_from=$login_from"
  (cd "$here" && TLS_BROKER=rabbitmq TLS_CERT_DIR="$certs" TLS_AMQPS_PORT="$tls_port" \
     TLS_VERIFY="$mode_env" TLS_LOGIN_FROM="$login_from" "$python" -m pytest -rs py/test_tls.py "$@") \
    || status=1
  "$rabbit" stop "$port"
}

run_mode none distinguished_name
run_mode verify_peer common_name
run_mode verify_peer distinguished_name -k "dn or not_offered"
run_mode fail_if_no_peer_cert distinguished_name
exit $status
