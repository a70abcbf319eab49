#!/usr/bin/env bash
# Tests the Debian package of a built warren binary (release or debug):
#   1. README.md's server flags table and `warren ctl` options agree with `--help` and the
#      generated man pages (no root needed);
#   2. the package builds (packaging/debian/build.sh);
#   3. as root where dpkg is: it installs (dpkg -i), its files are where they belong, the unit
#      passes `systemd-analyze verify`; the broker starts as the unit's ExecStart line says
#      (read from the installed unit, with its User, WorkingDirectory, LimitNOFILE and
#      NOTIFY_SOCKET, in a clean environment as systemd gives one) with the packaged config,
#      on free ports (environment variables win over the config file); it says READY=1;
#      real clients use it (warren perf, warren ctl, and pika from tests/interop/.venv when
#      that exists); SIGTERM stops it with exit 0 within 10 s, closing the client with 320
#      CONNECTION_FORCED; `dpkg --purge` leaves no user, group, data or file behind.
# Usage: packaging/test_package.sh BINARY   (./test.sh runs it on its release build)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: packaging/test_package.sh BINARY (a built warren)" >&2
  exit 64
fi
binary=$(realpath "$1")
started=$SECONDS
checks=0
work=$(mktemp -d /tmp/warren-package-test-XXXXXX)
chmod 0755 "$work"

ok() { checks=$((checks + 1)); echo "ok: $*"; }
fail() { echo "FAILED: $*"; exit 1; }

broker_pid=""
notify_pid=""
installed_by_us=0
cleanup() {
  local rc=$?
  if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
    kill -KILL "$broker_pid" 2>/dev/null || true
  fi
  if [ -n "$notify_pid" ]; then kill "$notify_pid" 2>/dev/null || true; fi
  if [ $rc -ne 0 ] && [ -f "$work/broker.log" ]; then
    echo "-- the packaged broker's log (last 30 lines):"; tail -30 "$work/broker.log"
  fi
  if [ $installed_by_us -eq 1 ] && dpkg -s warren >/dev/null 2>&1; then
    dpkg --purge warren >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

flags_of() { grep -oE '^ +(-[A-Za-z], )?--[a-z0-9-]+' | grep -oE -- '--[a-z0-9-]+' | grep -vx -- '--help\|--version' | sort -u; }
envs_of() { grep -oE 'WARREN_[A-Z0-9_]+' | sort -u; }

# --- 1. the documentation agrees with the binary ---------------------------------------------
server_help=$("$binary" server --help)
# The table's rows, an escaped `\|` inside a cell made a `/`, so that cut counts cells.
readme_server=$(sed -n '/^## Server options/,/^## /p' README.md | grep '^| `--' | sed 's/\\|/\//g')
help_flags=$(flags_of <<<"$server_help")
readme_flags=$(cut -d'|' -f2 <<<"$readme_server" | grep -oE -- '--[a-z0-9-]+' | sort -u)
if [ "$help_flags" != "$readme_flags" ]; then
  echo "< only in \`warren server --help\`, > only in README.md's table:"
  diff <(echo "$help_flags") <(echo "$readme_flags") | grep '^[<>]' || true
  fail "README.md's server flags table does not list the flags of warren server --help"
fi
help_envs=$(grep -oE 'env: WARREN_[A-Z0-9_]+' <<<"$server_help" | envs_of)
readme_envs=$(cut -d'|' -f3 <<<"$readme_server" | envs_of)
if [ "$help_envs" != "$readme_envs" ]; then
  diff <(echo "$help_envs") <(echo "$readme_envs") | grep '^[<>]' || true
  fail "README.md's server table does not give the environment variables of --help"
fi
ok "README.md's server table: the $(wc -l <<<"$help_flags") flags and environment variables of warren server --help"
# README's `warren ctl` paragraph: each option with its variable (and default) as --help has it.
ctl_help=$("$binary" ctl --help)
while IFS='|' read -r flag env default readme; do
  line=$(grep -A6 -- "^ *--$flag " <<<"$ctl_help" | sed '/^$/q' | tr '\n' ' ')
  grep -q "env: $env" <<<"$line" || fail "warren ctl --help: --$flag has no env $env"
  if [ -n "$default" ]; then
    grep -qF "default: $default" <<<"$line" || fail "warren ctl --help: --$flag's default is not $default"
  fi
  grep -qF -- "$readme" README.md || fail "README.md no longer says $readme: check it against warren ctl --help"
done <<'EOF'
url|WARREN_MGMT_URL|http://127.0.0.1:15672|`--url` (`WARREN_MGMT_URL`, default http://127.0.0.1:15672)
username|WARREN_USER|guest|`--username`/`--password`
password|WARREN_PASS||(`WARREN_USER`/`WARREN_PASS`, default guest/guest)
cacert|WARREN_MGMT_CACERT||`--cacert` (`WARREN_MGMT_CACERT`
EOF
ok "README.md's warren ctl options (--url, --username, --password, --cacert) as warren ctl --help gives them"
"$binary" generate-manpage "$work/man" 2>/dev/null
# The pages' text without roff's escapes (`\-`) and fonts (`\fB`).
unroff() { sed -e 's/\\-/-/g' -e 's/\\f[BRI]//g' "$work/man/$1.1" >"$work/$1.txt"; }
unroff warren-server
unroff warren-ctl
for flag in $help_flags; do
  grep -q -- "$flag" "$work/warren-server.txt" || fail "man warren-server lacks $flag"
done
for flag in $(flags_of <<<"$ctl_help"); do
  grep -q -- "$flag" "$work/warren-ctl.txt" || fail "man warren-ctl lacks $flag"
done
# Every ctl command --help lists has a page.
while read -r command; do
  [ -f "$work/man/warren-ctl-$command.1" ] || fail "no man page for warren ctl $command"
done < <(sed -n '/^Commands:/,/^$/p' <<<"$ctl_help" | awk 'NR>1 && NF && $1 != "help" {print $1}')
ok "man pages: warren-server.1 and warren-ctl.1 have every flag of --help, each ctl command a page ($(find "$work/man" -name '*.1' | wc -l) pages)"

# Every key of the packaged config file, the commented examples too, names a flag of
# `warren server --help` (a key under [table] is table-key); the file itself is what the
# broker starts with below.
python3 - packaging/warren.toml >"$work/config-keys" <<'PY'
import re, sys
table = ""
for line in open(sys.argv[1]):
    line = line.strip()
    header = re.fullmatch(r"#? ?\[([a-z0-9-]+)\]", line)
    if header:
        table = header.group(1) + "-"
        continue
    key = re.match(r"#? ?([a-z0-9_-]+) = ", line)
    if key:
        print("--" + table + key.group(1).replace("_", "-"))
PY
[ "$(wc -l <"$work/config-keys")" -gt 20 ] || fail "packaging/warren.toml: too few keys found ($(wc -l <"$work/config-keys"))"
while read -r flag; do
  grep -qx -- "$flag" <<<"$help_flags" || fail "packaging/warren.toml sets ${flag#--}, which warren server --help does not have"
done <"$work/config-keys"
ok "packaging/warren.toml: its $(wc -l <"$work/config-keys") keys (commented ones too) are flags of warren server --help"

# --- 2. the package builds ---------------------------------------------------------------------
if ! command -v dpkg-deb >/dev/null; then
  echo "skipped: building and installing the package (dpkg-deb is not installed)"
  exit 0
fi
version="$("$binary" --version | awk '{print $2}')-1"
build_started=$SECONDS
deb=$(packaging/debian/build.sh "$version" "$binary" "$work/out")
ok "built $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB) in $((SECONDS - build_started)) s"
depends=$(dpkg-deb --field "$deb" Depends)
[[ $depends == libc6*adduser ]] || fail "the package's Depends: $depends"

# --- 3. installed, run as the unit runs it, purged -----------------------------------------------
if [ "$(id -u)" -ne 0 ] || ! command -v dpkg >/dev/null; then
  echo "skipped: installing the package (needs root and dpkg; this is uid $(id -u))"
  exit 0
fi
if dpkg -s warren >/dev/null 2>&1; then
  echo "a warren package is installed (left by an earlier run?): purging it first"
  dpkg --purge warren >/dev/null
fi
if getent passwd warren >/dev/null; then
  echo "skipped: installing the package (a 'warren' user exists that this package did not create)"
  exit 0
fi

installed_by_us=1
dpkg -i "$deb" >"$work/dpkg-i.log" 2>&1 || { cat "$work/dpkg-i.log"; fail "dpkg -i"; }
# Where systemd runs, postinst started the unit (on the config's ports and data directory):
# it stops, so that the broker below is the only one on /var/lib/warren.
if [ -d /run/systemd/system ]; then
  systemctl stop warren.service || true
fi
dpkg -L warren >"$work/files"
expected=(/usr/bin/warren /usr/lib/systemd/system/warren.service /etc/warren/warren.toml
  /usr/share/man/man1/warren.1.gz /usr/share/man/man1/warren-server.1.gz
  /usr/share/man/man1/warren-ctl.1.gz /usr/share/man/man1/warren-perf.1.gz
  /usr/share/bash-completion/completions/warren /usr/share/zsh/vendor-completions/_warren
  /usr/share/fish/vendor_completions.d/warren.fish /usr/share/doc/warren/copyright)
for path in "${expected[@]}"; do
  grep -qx "$path" "$work/files" || fail "dpkg -L warren does not list $path"
  [ -f "$path" ] || fail "$path is listed but not installed"
done
[ "$(stat -c %a /usr/bin/warren)" = 755 ] || fail "/usr/bin/warren is not 0755"
ok "dpkg -i; dpkg -L lists $(wc -l <"$work/files") paths, the binary, unit, config, man pages, completions among them"

IFS=: read -r _ _ uid gid _ home shell < <(getent passwd warren)
if [ "$home" != /var/lib/warren ] || [ "$shell" != /usr/sbin/nologin ]; then
  fail "the warren user: home $home, shell $shell"
fi
[ "$uid" -lt 1000 ] || fail "the warren user is not a system user (uid $uid)"
[ "$(getent group warren | cut -d: -f3)" = "$gid" ] || fail "warren's group is not 'warren'"
[ "$(stat -c '%U:%G %a' /var/lib/warren)" = "warren:warren 750" ] || fail "/var/lib/warren: $(stat -c '%U:%G %a' /var/lib/warren)"
[ "$(stat -c '%U:%G %a' /etc/warren/warren.toml)" = "root:warren 640" ] || fail "/etc/warren/warren.toml: $(stat -c '%U:%G %a' /etc/warren/warren.toml)"
grep -qx /etc/warren/warren.toml <(dpkg-query -W -f='${Conffiles}\n' warren | awk 'NF {print $1}') || fail "warren.toml is not a conffile"
ok "postinst: system user warren (uid $uid, home /var/lib/warren, nologin), /var/lib/warren warren:warren 0750, warren.toml root:warren 0640 (a conffile)"

unit=/usr/lib/systemd/system/warren.service
if command -v systemd-analyze >/dev/null; then
  # Without systemd running, verify still checks the unit's syntax, its binary and its man page.
  if ! SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$unit" >"$work/verify.log" 2>&1; then
    cat "$work/verify.log"; fail "systemd-analyze verify $unit"
  fi
  # A setting it cannot parse is only a warning ("…, ignoring"): any output fails.
  if [ -s "$work/verify.log" ]; then cat "$work/verify.log"; fail "systemd-analyze verify warns about $unit"; fi
  ok "systemd-analyze verify $unit"
else
  echo "skipped: systemd-analyze verify (not installed)"
fi
if command -v man >/dev/null; then
  MANWIDTH=100 man -l /usr/share/man/man1/warren-server.1.gz >"$work/man.out" 2>&1 || true
  grep -q -- "--config" "$work/man.out" || fail "man warren-server does not render: $(head -5 "$work/man.out")"
  ok "man -l warren-server.1.gz renders"
fi
bash -n /usr/share/bash-completion/completions/warren || fail "the bash completion script does not parse"
if command -v zsh >/dev/null; then zsh -n /usr/share/zsh/vendor-completions/_warren || fail "zsh completions"; fi
if command -v fish >/dev/null; then fish -n /usr/share/fish/vendor_completions.d/warren.fish || fail "fish completions"; fi

# The unit's settings, read from the installed unit.
setting() { sed -n "s/^$1=//p" "$unit" | tail -1; }
read -ra exec_start <<<"$(setting ExecStart)"
user=$(setting User)
group=$(setting Group)
workdir=$(setting WorkingDirectory)
nofile=$(setting LimitNOFILE)
[ "$(setting Type)" = notify ] || fail "the unit's Type is $(setting Type), this test expects notify"
if [ -z "$user" ] || [ -z "$workdir" ] || [ -z "$nofile" ]; then
  fail "the unit lacks User, WorkingDirectory or LimitNOFILE"
fi
# The unit's open-files limit, unless the machine's hard limit is lower and cannot be raised
# (a container without CAP_SYS_RESOURCE: systemd could not raise it either).
if ! prlimit --nofile="$nofile:$nofile" true 2>/dev/null; then
  echo "note: LimitNOFILE=$nofile cannot be set here (hard limit $(ulimit -Hn)): the broker runs with $(ulimit -Hn)"
  nofile=$(ulimit -Hn)
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
mgmt_port=$(free_port)
prometheus_port=$(free_port)

# systemd's side of sd_notify: a datagram socket the broker writes READY=1 and STOPPING=1 to.
notify_socket="$work/notify.sock"
python3 -u - "$notify_socket" >"$work/notify.log" 2>&1 <<'PY' &
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o666)
s.settimeout(60)
while True:
    message = s.recv(4096).decode()
    print(message.strip().replace("\n", " "))
    if "STOPPING=1" in message:
        break
PY
notify_pid=$!
for _ in $(seq 1 50); do [ -S "$notify_socket" ] && break; sleep 0.1; done

# As systemd would: the unit's user and group, working directory and open-files limit, a clean
# environment (PATH, HOME, USER, LOGNAME, SHELL, NOTIFY_SOCKET); the ports through the
# variables, which win over /etc/warren/warren.toml. prlimit, setpriv and env exec, so the
# process started here is the broker.
exec_started=$SECONDS
(
  cd "$workdir"
  exec prlimit --nofile="$nofile:$nofile" setpriv --reuid="$user" --regid="${group:-$user}" \
    --init-groups env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" USER="$user" \
    LOGNAME="$user" SHELL="$shell" NOTIFY_SOCKET="$notify_socket" \
    WARREN_AMQP_PORT="$port" WARREN_MANAGEMENT_PORT="$mgmt_port" \
    WARREN_PROMETHEUS_PORT="$prometheus_port" "${exec_start[@]}"
) >"$work/broker.log" 2>&1 &
broker_pid=$!
for _ in $(seq 1 300); do
  grep -q "READY=1" "$work/notify.log" && break
  kill -0 "$broker_pid" 2>/dev/null || fail "the packaged broker exited at startup"
  sleep 0.1
done
grep -q "READY=1" "$work/notify.log" || fail "no READY=1 from the broker in 30 s"
(echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null || fail "READY=1, yet nothing listens on port $port"
ok "started as '${exec_start[*]}' (user $user, in $workdir): READY=1 after $((SECONDS - exec_started)) s, AMQP on $port"
[ "$(awk '/^Uid:/ {print $2}' "/proc/$broker_pid/status")" = "$uid" ] || fail "the broker does not run as $user"
grep -q "^Max open files *$nofile *$nofile" "/proc/$broker_pid/limits" || fail "the broker's open-files limit is not $nofile"
grep -q 'data_dir=/var/lib/warren' "$work/broker.log" || fail "the broker does not use the packaged config's data-dir"
ok "the broker runs as $user with LimitNOFILE $nofile and the packaged config (data_dir=/var/lib/warren)"

uri="amqp://guest:guest@127.0.0.1:$port"
/usr/bin/warren perf --uri "$uri" -x 1 -y 1 -s 100 -c 100 -f persistent -C 2000 -z 20 -u package-test -ad false \
  --quiet >"$work/perf.log" 2>&1 || { cat "$work/perf.log"; fail "warren perf"; }
grep -q "sent: 2000, confirmed: 2000, nacked: 0, returned: 0, received: 2000, duplicates: 0, lost: 0" \
  "$work/perf.log" || { cat "$work/perf.log"; fail "warren perf: not every message confirmed and received once"; }
ok "warren perf: 2000 persistent confirmed messages through the queue package-test, none lost"
/usr/bin/warren ctl --url "http://127.0.0.1:$mgmt_port" -q list_queues name durable >"$work/ctl.log" 2>&1 ||
  { cat "$work/ctl.log"; fail "warren ctl list_queues"; }
grep -q "package-test" "$work/ctl.log" || { cat "$work/ctl.log"; fail "warren ctl does not list the queue"; }
ok "warren ctl list_queues over the HTTP API on $mgmt_port"

pika_pid=""
venv_python="$root/tests/interop/.venv/bin/python"
if [ -x "$venv_python" ] && "$venv_python" -c 'import pika' 2>/dev/null; then
  "$venv_python" -u - "$port" >"$work/pika.log" 2>&1 <<'PY' &
import sys, pika
params = pika.ConnectionParameters("127.0.0.1", int(sys.argv[1]), heartbeat=0,
                                   credentials=pika.PlainCredentials("guest", "guest"))
connection = pika.BlockingConnection(params)
channel = connection.channel()
channel.confirm_delivery()
channel.queue_declare("package-test-pika", durable=True)
channel.basic_publish("", "package-test-pika", b"kept",
                      pika.BasicProperties(delivery_mode=2))
print("published", flush=True)
try:
    while True:
        connection.process_data_events(time_limit=1)
except pika.exceptions.ConnectionClosedByBroker as e:
    print(f"closed by the broker: {e.reply_code} {e.reply_text}")
PY
  pika_pid=$!
  for _ in $(seq 1 100); do grep -q published "$work/pika.log" && break; sleep 0.1; done
  grep -q published "$work/pika.log" || { cat "$work/pika.log"; fail "pika did not publish"; }
  ok "pika: a persistent message published with a confirm; the connection stays open"
else
  echo "skipped: pika (no tests/interop/.venv; tests/interop/venv.sh makes it)"
fi

stop_started=$(date +%s%N)
kill -TERM "$broker_pid"
for _ in $(seq 1 100); do kill -0 "$broker_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$broker_pid" 2>/dev/null && fail "the broker still runs 10 s after SIGTERM"
rc=0
wait "$broker_pid" || rc=$?
broker_pid=""
stop_ms=$((($(date +%s%N) - stop_started) / 1000000))
[ $rc -eq 0 ] || fail "the broker exited $rc after SIGTERM"
grep -q "Warren stopped" "$work/broker.log" || fail "no 'Warren stopped' in the broker's log"
wait "$notify_pid" || true
notify_pid=""
grep -q "STOPPING=1" "$work/notify.log" || fail "no STOPPING=1 from the broker"
ok "SIGTERM: STOPPING=1, exit 0 after $stop_ms ms"
if [ -n "$pika_pid" ]; then
  wait "$pika_pid" || true
  grep -q "closed by the broker: 320" "$work/pika.log" || { cat "$work/pika.log"; fail "pika was not closed with 320"; }
  ok "pika's connection closed by the broker: $(grep -o '320.*' "$work/pika.log")"
fi
[ -z "$(find /var/lib/warren ! -user warren)" ] || fail "files under /var/lib/warren not owned by warren: $(find /var/lib/warren ! -user warren | head -3)"
[ -d /var/lib/warren/store ] || fail "no store under /var/lib/warren"
ok "the data under /var/lib/warren belongs to warren"

dpkg --purge warren >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "dpkg --purge warren"; }
installed_by_us=0
dpkg -s warren >/dev/null 2>&1 && fail "dpkg still lists warren"
getent passwd warren >/dev/null && fail "the warren user is still there"
getent group warren >/dev/null && fail "the warren group is still there"
for path in /var/lib/warren /etc/warren /etc/systemd/system/warren.service \
  /etc/systemd/system/multi-user.target.wants/warren.service; do
  [ -e "$path" ] || [ -L "$path" ] && fail "$path is still there"
done
while read -r path; do
  case $path in /usr/bin/warren | */warren.* | */warren-* | */_warren | */warren | /usr/share/doc/warren/*)
    [ -e "$path" ] && fail "$path is still there" ;;
  esac
done <"$work/files"
ok "dpkg --purge: no package, user, group, data, config, unit link or file left"

echo "test_package.sh: all $checks checks passed in $((SECONDS - started)) s"
