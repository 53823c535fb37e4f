#!/bin/sh
# Builds dist/hello-VERSION.unix.cronus, a small package of the .cronus format, and its .prop file (md5).
#   ./build.sh 1.0.0 && ./build.sh 1.1.0
# The application is a shell loop that writes a heartbeat into the service's shared .appdata/.
set -eu
version="${1:-1.0.0}"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/cronus/scripts" "$work/app" "$here/dist"

cat > "$work/app/hello.sh" <<APP
#!/bin/sh
# hello $version: a heartbeat every second.
while :; do echo "hello $version \$(date -u +%H:%M:%S)" > "\$CRONUSAPP_HOME/.appdata/heartbeat"; sleep 1; done
APP

echo '{"name": "hello", "description": "heartbeat demo"}' > "$work/cronus/cronus.prop"
echo '{}' > "$work/cronus/cronus.ini"

script() { cat > "$work/cronus/scripts/$1"; chmod 755 "$work/cronus/scripts/$1"; }

script install <<'S'
#!/bin/sh
# Once per version: progress as the seed's messages, then a result.
echo "[AGENT_MESSAGE] 20 [AGENT_MESSAGE_END]"
mkdir -p "$CRONUSAPP_HOME/.appdata"
echo "[AGENT_MESSAGE] +80"
echo '[AGENT_MESSAGE] {"progress": 100, "result": [{"key": "appdata", "value": "'"$CRONUSAPP_HOME/.appdata"'"}]} [AGENT_MESSAGE_END]'
S
script activate <<'S'
#!/bin/sh
echo "activated $(readlink "$CRONUSAPP_HOME/manifests/active") (correlation id $LCM_CORRELATIONID)"
S
script startup <<'S'
#!/bin/sh
# Must return: the application is detached (its own session, no inherited output).
app="$(cd "$(dirname "$0")/../.." && pwd)/app/hello.sh"
setsid sh "$app" > /dev/null 2>&1 < /dev/null &
echo $! > "$CRONUSAPP_HOME/.appdata/pid"
echo "[AGENT_MESSAGE] {\"progress\": 100, \"result\": [{\"key\": \"pid\", \"value\": \"$!\"}]} [AGENT_MESSAGE_END]"
S
script running <<'S'
#!/bin/sh
# Alive and not a zombie.
pid="$(cat "$CRONUSAPP_HOME/.appdata/pid" 2>/dev/null)" || exit 1
[ -r "/proc/$pid/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status"
S
script shutdown <<'S'
#!/bin/sh
pid="$(cat "$CRONUSAPP_HOME/.appdata/pid" 2>/dev/null)" || exit 0
kill "$pid" 2>/dev/null || true
rm -f "$CRONUSAPP_HOME/.appdata/pid"
echo "stopped $pid"
S
script deactivate <<'S'
#!/bin/sh
echo "deactivated"
S

file="hello-$version.unix.cronus"
tar -czf "$here/dist/$file" -C "$work" cronus app
md5="$(md5sum "$here/dist/$file" | cut -d' ' -f1)"
printf '{"name": "%s", "md5": "%s", "description": "heartbeat demo"}\n' "$file" "$md5" > "$here/dist/$file.prop"
echo "built dist/$file (md5 $md5)"
