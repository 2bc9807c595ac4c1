#!/usr/bin/env bash
# static.sh CNLAB - the CLI is one statically linked executable (issue
# 19): `file` says so, it has no program interpreter and no dynamic
# section, and it still works where static linking could break it:
# it runs, and it resolves a host name from /etc/hosts (glibc's static
# getaddrinfo) so that "localhost" is refused as a connection, not as an
# unknown name.
set -u
cnlab=$1
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
info=$(file -L "$cnlab")
grep -q "statically linked" <<<"$info" && ok "file: statically linked" ||
	bad "file: $info"
readelf -lW "$cnlab" | grep -q "INTERP" && bad "has a program interpreter" ||
	ok "no program interpreter"
readelf -dW "$cnlab" | grep -q "There is no dynamic section" &&
	ok "no dynamic section" || bad "dynamic section: $(readelf -dW "$cnlab" | head -5)"
out=$("$cnlab" --version 2>&1) && grep -q "^cnlab " <<<"$out" &&
	ok "runs: $out" || bad "--version: $out"
# A port nobody listens on, by a name from /etc/hosts.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$(HOME=$tmp XDG_CONFIG_HOME=$tmp CNLAB_CONFIG=$tmp/c.json \
	CNLAB_SERVER=http://localhost:$port CNLAB_TOKEN=t "$cnlab" jobs list 2>&1)
grep -q "Couldn't connect to server" <<<"$out" &&
	ok "localhost resolved" || bad "localhost: $out"
[ $fails = 0 ] || exit 1
