#!/usr/bin/env bash
# ssh.sh - `cnlab server ssh` (issue 24) with OpenSSH's own ssh, scp, sftp
# and rsync, a real all-in-one, a second real agent, real crun containers
# and the real CLI, tried the way a researcher's IDE and a curious
# colleague would:
#   - cnlab ssh-key add|list|remove: a key made by ssh-keygen is taken
#     with ssh-keygen's fingerprint; a private key, a key with options, a
#     weak RSA key, garbage and a duplicate are refused naming why; a
#     user's keys are theirs alone (the administrator sees none)
#   - a session idle for 5 minutes (no keep-alives) still answers; 16
#     sessions at once each get their own answer
#   - cnlab server ssh-config prints a Host entry (ProxyCommand through
#     cnlab, the host key pinned); with it, ssh runs commands and a pty
#     shell as the tenant in /workspace, with the server's environment;
#     scp both ways, sftp, rsync -e ssh and ssh -L to the server's port;
#     cnlab server ssh NAME -- CMD; an image without sshd gets the node's
#   - the pinned key: a wrong host key in the entry is refused by ssh
#   - nothing of the owner's machine is forwarded in (ssh -A, ssh -R),
#     where the project's other members could reach it
#   - refused: a key not registered, another member of the project (the
#     server is its owner's), the administrator, a user of another
#     project, an unknown server (exit 4), a stopped server (the message
#     says cnlab server start), no keys at all
#   - the session's files are read-only in the container
#   - removing the key in use, or disabling the user, closes the open
#     session; the next connection with the removed key is refused
#   - a node lost mid-session ends the session with a message; once the
#     node is back, ssh works again
#   - audit: server.ssh, ssh_key.add, ssh_key.remove; the host key's
#     private half is not in the database in clear
#   - no sshd and no tunnel is left behind once sessions end
set -u
cnlabd=$1
agent=$2
cli=$3
tmp=$(mktemp -d)
chmod 755 "$tmp"
pid=
remote=
cleanup() {
	# Workloads outlive their agents: stop every server first (as its
	# owner, through the platform), then whatever is left.
	if [ -n "$pid" ]; then
		for u in ana bob carl; do
			for s in $(CNLAB_CONFIG=$tmp/$u.json "$cli" server list -o json 2>/dev/null |
				jq -r '.items[] | select(.state != "stopped" and .state != "failed") | .name' 2>/dev/null); do
				CNLAB_CONFIG=$tmp/$u.json "$cli" server stop "$s" >/dev/null 2>&1
			done
		done
		for _ in $(seq 100); do
			n=0
			for u in ana bob carl; do
				n=$((n + $(CNLAB_CONFIG=$tmp/$u.json "$cli" server list -o json 2>/dev/null |
					jq '[.items[] | select(.state != "stopped" and .state != "failed")] | length' 2>/dev/null || echo 0)))
			done
			[ "$n" = 0 ] && break
			sleep 0.2
		done
	fi
	[ -n "$remote" ] && kill -9 "$remote" 2>/dev/null
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	for root in "$tmp/remote/crun" "$tmp/data/agent/crun"; do
		for c in $(crun --root "$root" list -q 2>/dev/null); do
			crun --root "$root" kill "$c" KILL 2>/dev/null
			crun --root "$root" delete -f "$c" 2>/dev/null
		done
	done
	grep -h ' cnl-ws-' /proc/mounts 2>/dev/null | cut -d' ' -f2 | grep "^$tmp" |
		while read -r m; do umount -l "$m"; done
	for m in $(grep " $tmp" /proc/mounts | cut -d' ' -f2 | sort -r); do umount -l "$m" 2>/dev/null; done
	losetup -a 2>/dev/null | grep "($tmp/" | cut -d: -f1 | while read -r l; do losetup -d "$l" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD XDG_CONFIG_HOME
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || {
	echo "FAIL /usr/sbin/sshd is missing (scripts/bootstrap installs openssh-server)"
	exit 1
}

HOME=$tmp/home "$cnlabd" --all-in-one --data-dir "$tmp/data" --node-lost-timeout 300s \
	--listen 127.0.0.1:0 --gpus fake:1xH100-80GB-SXM >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 200); do
	grep -q 'CNLab is running' "$tmp/out" && break
	sleep 0.1
done
url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
[ -n "$url" ] || {
	echo "FAIL start: $(cat "$tmp/err")"
	exit 1
}
cnlab() { CNLAB_CONFIG=$tmp/admin.json "$cli" "$@"; }
as() { # as USER ARGS...
	local u=$1
	shift
	CNLAB_CONFIG=$tmp/$u.json "$cli" "$@"
}
cnlab login --server "$url" --user admin --password-stdin <"$tmp/data/admin.password" >/dev/null 2>&1 ||
	bad "admin login"
cnlab project create vision >/dev/null 2>&1
for u in ana bob carl; do
	echo "$u-password-1" | cnlab user create $u --password-stdin >/dev/null 2>&1
done
cnlab project member add default ana >/dev/null 2>&1
cnlab project member add default bob >/dev/null 2>&1
cnlab project member add vision carl >/dev/null 2>&1
for u in ana bob carl; do
	echo "$u-password-1" | as $u login --server "$url" --user $u --password-stdin >/dev/null 2>&1 ||
		bad "$u login"
done
mkdir -m 700 "$tmp/keys"
for k in ana ana2 bob other; do
	ssh-keygen -q -t ed25519 -N '' -C "$k@laptop" -f "$tmp/keys/$k" || bad "ssh-keygen $k"
done
ssh-keygen -q -t rsa -b 1024 -N '' -f "$tmp/keys/weak"

# --- keys -------------------------------------------------------------------------
out=$(as ana ssh-key add "$tmp/keys/ana.pub" 2>&1)
fp=$(ssh-keygen -lf "$tmp/keys/ana.pub" | cut -d' ' -f2)
[ $? = 0 ] && grep -q "^✓ SSH key ana-laptop added (ssh-ed25519 $fp)$" <<<"$out" &&
	ok "cnlab ssh-key add FILE.pub: named from its comment, ssh-keygen's fingerprint" ||
	bad "ssh-key add: $out (want $fp)"
as ana ssh-key list >"$tmp/o" 2>&1
awk -v fp="$fp" '$1 == "ana-laptop" && $2 == "ssh-ed25519" && $3 == fp && $4 == "ana@laptop" { f = 1 } END { exit !f }' \
	"$tmp/o" && ok "cnlab ssh-key list" ||
	bad "list: $(cat "$tmp/o")"
try_add() { # try_add WANT_RC WANT_TEXT WHAT FILE [ARGS]
	local want=$1 text=$2 what=$3 rc
	shift 3
	out=$(as ana ssh-key add "$@" 2>&1)
	rc=$?
	[ $rc = "$want" ] && grep -q -- "$text" <<<"$out" && ok "refused: $what" ||
		bad "$what: rc=$rc $out"
}
try_add 2 "is a private key" "a private key file (it never leaves the machine)" "$tmp/keys/ana"
try_add 5 "already yours" "the same key twice (409, exit 5)" "$tmp/keys/ana.pub"
printf 'command="/bin/sh" %s\n' "$(cat "$tmp/keys/other.pub")" >"$tmp/opt.pub"
try_add 2 "options" "a key with authorized_keys options" "$tmp/opt.pub"
try_add 2 "too weak" "an RSA key of 1024 bits" "$tmp/keys/weak.pub"
echo "ssh-ed25519 not-base64 x" >"$tmp/junk.pub"
try_add 2 "not base64" "a key that is not base64" "$tmp/junk.pub"
{ cat "$tmp/keys/other.pub" "$tmp/keys/bob.pub"; } >"$tmp/two.pub"
try_add 2 "second line" "two keys in one go" "$tmp/two.pub"
try_add 2 "field \"name\"" "a bad --name" "$tmp/keys/other.pub" --name "../x"
[ "$(as ana ssh-key list -o json | jq '.items | length')" = 1 ] &&
	ok "nothing refused was stored" || bad "stored: $(as ana ssh-key list)"
as bob ssh-key add "$tmp/keys/bob.pub" >/dev/null 2>&1 || bad "bob adds his key"
[ "$(cnlab ssh-key list -o json | jq '.items | length')" = 0 ] &&
	[ "$(as bob ssh-key list -o json | jq -r '[.items[].name] | join(",")')" = bob-laptop ] &&
	ok "a user's keys are theirs alone (the administrator lists none of them)" ||
	bad "key isolation: $(cnlab ssh-key list -o json) / $(as bob ssh-key list -o json)"
as bob ssh-key remove ana-laptop >"$tmp/o" 2>&1
[ $? = 4 ] && [ "$(as ana ssh-key list -o json | jq '.items | length')" = 1 ] &&
	ok "another user cannot remove a key (404, exit 4)" || bad "bob removes ana's: $(cat "$tmp/o")"

# --- a session idle for 5 minutes (bob's, which nothing below touches) ---------------
# No keep-alives (ServerAliveInterval=0): nothing crosses the tunnel
# until, 300 s later, a line is sent and the remote shell answers it.
as bob server create --name bobs --image host --profile h100-25pct >"$tmp/o" 2>&1 ||
	bad "bob's server: $(cat "$tmp/o")"
as bob server ssh-config bobs >"$tmp/bobs.cfg" 2>&1
mkfifo "$tmp/idle.in"
exec 7<>"$tmp/idle.in"
CNLAB_CONFIG=$tmp/bob.json timeout 900 ssh -F "$tmp/bobs.cfg" -i "$tmp/keys/bob" -o IdentitiesOnly=yes \
	-o BatchMode=yes -o ServerAliveInterval=0 cnlab-bobs 'echo ready; read x; echo "alive-$x"' \
	<&7 >"$tmp/idle.out" 2>"$tmp/idle.err" &
idle=$!
idle_t0=$(date +%s)

# --- a server, and ssh into it ------------------------------------------------------
as ana server create --name nb --image host --profile h100-25pct >"$tmp/o" 2>&1 ||
	bad "server create: $(cat "$tmp/o")"
as ana server ssh-config nb >"$tmp/nb.cfg" 2>&1
hk=$(sed -n 's/^ *KnownHostsCommand \/bin\/echo cnlab-nb \(ssh-ed25519 [A-Za-z0-9+/=]*\)$/\1/p' "$tmp/nb.cfg")
grep -q '^Host cnlab-nb$' "$tmp/nb.cfg" && grep -q "ProxyCommand '.*cnlab' --server '$url' --project 'default' server ssh-proxy 'nb'" "$tmp/nb.cfg" &&
	grep -q '^ *StrictHostKeyChecking yes$' "$tmp/nb.cfg" && grep -q '^ *User ana$' "$tmp/nb.cfg" && [ -n "$hk" ] &&
	ok "cnlab server ssh-config NAME: a Host entry, ProxyCommand through cnlab, the host key pinned" ||
	bad "ssh-config: $(cat "$tmp/nb.cfg")"
[ "$(as ana server ssh-config nb -o json | jq -r .host_key)" = "$hk" ] &&
	ok "the host key stays the server's" || bad "host key changed"
# ssh as an IDE runs it: the entry in a config file, the user's own key.
S() { # S KEY ARGS...: ssh with the entry and one identity
	local k=$1
	shift
	CNLAB_CONFIG=$tmp/ana.json timeout 120 ssh -F "$tmp/nb.cfg" -i "$tmp/keys/$k" \
		-o IdentitiesOnly=yes -o BatchMode=yes -o LogLevel=ERROR "$@"
}
got=$(S ana cnlab-nb 'id -un; id -u; pwd; echo "$HOME"' 2>"$tmp/e")
[ "$got" = "$(printf 'ana\n1000\n/workspace\n/workspace')" ] &&
	ok "ssh cnlab-nb CMD: as the tenant (uid 1000 in the container), in /workspace" ||
	bad "ssh cmd: '$got' $(cat "$tmp/e")"
quiet=0
for _ in $(seq 5); do
	S ana cnlab-nb true 2>"$tmp/e" && [ ! -s "$tmp/e" ] && quiet=$((quiet + 1))
done
[ $quiet = 5 ] && ok "a session that ends as it should says nothing on stderr (5 of 5)" ||
	bad "noise on a normal end ($quiet of 5 quiet): $(cat "$tmp/e")"
srv=$(as ana server show nb -o json | jq -r .id)
ssh_env=$(S ana cnlab-nb 'env' 2>/dev/null | grep -E '^(CNLAB_|CUDA_|NVIDIA_)' | grep -v '^CNLAB_SSH' | sort)
exec_env=$(as ana server exec nb -- env 2>/dev/null | grep -E '^(CNLAB_|CUDA_|NVIDIA_)' | sort)
[ -n "$ssh_env" ] && [ "$ssh_env" = "$exec_env" ] && grep -q "^CNLAB_JOB_ID=$srv$" <<<"$ssh_env" &&
	ok "an ssh session gets the server's environment (CNLAB_*, CUDA_*), as its own process has it" ||
	bad "env differs: ssh=[$ssh_env] exec=[$exec_env]"
[ "$(S ana cnlab-nb 'cat /etc/ld.so.preload' 2>/dev/null)" = "$(as ana server exec nb -- cat /etc/ld.so.preload 2>/dev/null)" ] &&
	ok "the same GPU shim is preloaded in an ssh session" || bad "preload differs"
got=$(S ana -tt cnlab-nb 'tty' 2>/dev/null | tr -d '\r')
case $got in /dev/pts/*) ok "ssh -t: a shell on a pty ($got)" ;; *) bad "pty: '$got'" ;; esac
head -c 3000000 /dev/urandom >"$tmp/big"
CNLAB_CONFIG=$tmp/ana.json timeout 120 scp -q -F "$tmp/nb.cfg" -i "$tmp/keys/ana" -o IdentitiesOnly=yes \
	-o BatchMode=yes "$tmp/big" cnlab-nb:/workspace/big 2>"$tmp/e" &&
	[ "$(as ana server exec nb -- sha256sum /workspace/big | cut -d' ' -f1)" = "$(sha256sum <"$tmp/big" | cut -d' ' -f1)" ] &&
	ok "scp up: 3 MB, the same bytes in the server's /workspace" || bad "scp up: $(cat "$tmp/e")"
CNLAB_CONFIG=$tmp/ana.json timeout 120 scp -q -F "$tmp/nb.cfg" -i "$tmp/keys/ana" -o IdentitiesOnly=yes \
	-o BatchMode=yes cnlab-nb:/workspace/big "$tmp/big.back" 2>"$tmp/e" && cmp -s "$tmp/big" "$tmp/big.back" &&
	ok "scp down: the same bytes back" || bad "scp down: $(cat "$tmp/e")"
printf 'cd /workspace\nput %s/keys/ana.pub sent.pub\nget big big.sftp\n' "$tmp" >"$tmp/batch"
(cd "$tmp" && CNLAB_CONFIG=$tmp/ana.json timeout 120 sftp -q -F "$tmp/nb.cfg" -i "$tmp/keys/ana" \
	-o IdentitiesOnly=yes -o BatchMode=yes -b "$tmp/batch" cnlab-nb >/dev/null 2>"$tmp/e") &&
	cmp -s "$tmp/big" "$tmp/big.sftp" && [ "$(S ana cnlab-nb cat /workspace/sent.pub)" = "$(cat "$tmp/keys/ana.pub")" ] &&
	ok "sftp: put and get" || bad "sftp: $(cat "$tmp/e")"
mkdir -p "$tmp/tree/sub"
echo one >"$tmp/tree/a"
echo two >"$tmp/tree/sub/b"
CNLAB_CONFIG=$tmp/ana.json timeout 120 rsync -a -e "ssh -F $tmp/nb.cfg -i $tmp/keys/ana -o IdentitiesOnly=yes -o BatchMode=yes" \
	"$tmp/tree/" cnlab-nb:/workspace/tree/ 2>"$tmp/e" &&
	[ "$(S ana cnlab-nb 'cat /workspace/tree/a /workspace/tree/sub/b')" = "$(printf 'one\ntwo')" ] &&
	ok "rsync -e ssh" || bad "rsync: $(cat "$tmp/e")"
# ssh -L: a local port to the server's own port (its notebook, 127.0.0.1
# inside the container's network).
sport=$(S ana cnlab-nb 'echo $CNLAB_PORT')
stok=$(S ana cnlab-nb 'echo $CNLAB_SERVER_TOKEN')
lport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
S ana -N -o ExitOnForwardFailure=yes -L "$lport:127.0.0.1:$sport" cnlab-nb 2>"$tmp/fwd.err" &
fwd=$!
code=
for _ in $(seq 100); do
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: token $stok" "http://127.0.0.1:$lport/s/$srv/")
	[ "$code" = 200 ] && break
	sleep 0.2
done
kill $fwd 2>/dev/null
wait $fwd 2>/dev/null
[ "$code" = 200 ] && ok "ssh -L: a local port reaches the server's notebook inside the container" ||
	bad "ssh -L: $code $(cat "$tmp/fwd.err")"
# cnlab server ssh: the user's own ssh, keys from their agent.
eval "$(ssh-agent -s)" >/dev/null
sshagent=$SSH_AGENT_PID
ssh-add -q "$tmp/keys/ana" 2>/dev/null
got=$(CNLAB_CONFIG=$tmp/ana.json timeout 120 "$cli" server ssh nb -- cat /workspace/tree/a 2>&1 </dev/null)
rc=$?
[ $rc = 0 ] && [ "$got" = one ] && ok "cnlab server ssh NAME -- CMD (the key from the user's ssh-agent)" ||
	bad "server ssh: rc=$rc $got"
CNLAB_CONFIG=$tmp/ana.json timeout 120 "$cli" server ssh nb -- exit 7 </dev/null >/dev/null 2>&1
rc=$?
# Nothing of the owner's machine comes into a server that the project's
# other members can exec into as the same tenant: not her ssh-agent
# (asked for with -A, as VS Code does), not a port of hers (-R).
S ana -A cnlab-nb 'echo "agent=${SSH_AUTH_SOCK:-none}"; sleep 5' >"$tmp/agent.out" 2>&1 &
agentses=$!
for _ in $(seq 100); do grep -q '^agent=' "$tmp/agent.out" && break; sleep 0.1; done
socks=$(as bob server exec nb -- sh -c 'ls -d /tmp/ssh-* 2>/dev/null | wc -l')
wait $agentses
grep -q '^agent=none$' "$tmp/agent.out" && [ "$socks" = 0 ] &&
	ok "ssh -A: no agent is forwarded into the server (another member finds no socket)" ||
	bad "agent forwarding: $(cat "$tmp/agent.out") sockets=$socks"
S ana -o ExitOnForwardFailure=yes -R "127.0.0.1:$lport:127.0.0.1:$lport" cnlab-nb 'echo forwarded' >"$tmp/o" 2>&1
[ $? = 255 ] && ! grep -q forwarded "$tmp/o" && ok "ssh -R: a port of the owner's machine is not forwarded in" ||
	bad "remote forwarding: $(cat "$tmp/o")"
kill "$sshagent" 2>/dev/null
unset SSH_AUTH_SOCK SSH_AGENT_PID
[ $rc = 7 ] && ok "cnlab server ssh: the remote command's exit code is ours" || bad "exit code: $rc"

# Many sessions at once.
for i in $(seq 16); do
	S ana cnlab-nb "sleep 1; echo session-$i" >"$tmp/par.$i" 2>&1 &
done
wait_par=0
for i in $(seq 16); do
	for _ in $(seq 600); do
		grep -q "^session-$i$" "$tmp/par.$i" && break
		sleep 0.1
	done
	grep -q "^session-$i$" "$tmp/par.$i" && wait_par=$((wait_par + 1))
done
[ $wait_par = 16 ] && ok "16 sessions at once, each its own answer" ||
	bad "parallel: $wait_par of 16 $(cat "$tmp"/par.* | grep -v '^session' | head -3)"

# The session's files: read-only to the tenant, this server's only.
out=$(S ana cnlab-nb 'ls /run/cnlab/ssh; echo x >>/run/cnlab/ssh/authorized_keys && echo WROTE; rm -f /run/cnlab/ssh/host_key && echo REMOVED' 2>&1)
grep -q authorized_keys <<<"$out" && ! grep -q WROTE <<<"$out" && ! grep -q REMOVED <<<"$out" &&
	ok "the session's keys and config are read-only in the container" || bad "ssh dir writable: $out"

# --- the pinned host key ------------------------------------------------------------
sed "s|$hk|$(cut -d' ' -f1,2 "$tmp/keys/other.pub")|" "$tmp/nb.cfg" >"$tmp/wrong.cfg"
CNLAB_CONFIG=$tmp/ana.json timeout 120 ssh -F "$tmp/wrong.cfg" -i "$tmp/keys/ana" -o IdentitiesOnly=yes \
	-o BatchMode=yes cnlab-nb true >/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 255 ] && grep -qi 'host key' "$tmp/e" && ok "a host key other than the pinned one is refused by ssh" ||
	bad "wrong host key: rc=$rc $(cat "$tmp/e")"

# --- refusals -----------------------------------------------------------------------
S other cnlab-nb true >/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 255 ] && grep -q 'Permission denied (publickey)' "$tmp/e" &&
	ok "a key that is not the owner's is refused by the server's sshd" || bad "other key: rc=$rc $(cat "$tmp/e")"
proxy() { # proxy USER SERVER: ssh-proxy with an empty stdin; rc, stderr in $tmp/e
	if [ "$1" = admin ]; then
		cnlab server ssh-proxy "$2" </dev/null >/dev/null 2>"$tmp/e"
	else
		as "$1" server ssh-proxy "$2" </dev/null >/dev/null 2>"$tmp/e"
	fi
}
proxy bob nb
rc=$?
[ $rc = 5 ] && grep -q 'not yours: only its owner may ssh' "$tmp/e" &&
	ok "another member of the project cannot open the owner's ssh stream (403, exit 5)" ||
	bad "bob: rc=$rc $(cat "$tmp/e")"
CNLAB_CONFIG=$tmp/bob.json timeout 120 ssh -F "$tmp/nb.cfg" -i "$tmp/keys/bob" -o IdentitiesOnly=yes \
	-o BatchMode=yes cnlab-nb true >/dev/null 2>"$tmp/e"
[ $? = 255 ] && grep -q 'not yours' "$tmp/e" && ok "... nor through ssh with his own key" ||
	bad "bob ssh: $(cat "$tmp/e")"
proxy admin nb
rc=$?
[ $rc = 5 ] && ok "nor the administrator" || bad "admin: rc=$rc $(cat "$tmp/e")"
proxy carl nb
rc=$?
[ $rc = 4 ] && ok "a user of another project does not find it (exit 4)" || bad "carl: rc=$rc $(cat "$tmp/e")"
proxy ana nope
rc=$?
[ $rc = 4 ] && grep -q 'server "nope" not found' "$tmp/e" && ok "an unknown server: exit 4, named" ||
	bad "unknown: rc=$rc $(cat "$tmp/e")"
as ana server create --name nb2 --image host --profile h100-25pct >/dev/null 2>&1
as ana server stop nb2 >/dev/null 2>&1
for _ in $(seq 300); do
	[ "$(as ana server show nb2 -o json | jq -r .state)" = stopped ] && break
	sleep 0.1
done
proxy ana nb2
rc=$?
[ $rc = 1 ] && grep -q 'cnlab server start nb2' "$tmp/e" &&
	ok "a stopped server: the message says cnlab server start" || bad "stopped: rc=$rc $(cat "$tmp/e")"
as carl server create --name cnb --image host --profile h100-25pct >/dev/null 2>&1
as carl server ssh-config cnb >"$tmp/c.cfg" 2>&1
as carl server ssh-proxy cnb </dev/null >/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 1 ] && grep -q 'no SSH keys' "$tmp/e" && grep -q 'cnlab ssh-key add' "$tmp/e" &&
	ok "no keys at all: the message says cnlab ssh-key add" || bad "no keys: rc=$rc $(cat "$tmp/e")"
as carl server ssh cnb -- true </dev/null >/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 1 ] && grep -q 'no SSH keys' "$tmp/e" && ok "cnlab server ssh with no keys: exit 1, the same message" ||
	bad "server ssh, no keys: rc=$rc $(cat "$tmp/e")"
as ana server ssh nb2 -- true </dev/null >/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 1 ] && grep -q 'cnlab server start nb2' "$tmp/e" &&
	ok "cnlab server ssh to a stopped server: exit 1, the message says cnlab server start" ||
	bad "server ssh, stopped: rc=$rc $(cat "$tmp/e")"
as ana server ssh nope -- true </dev/null >/dev/null 2>"$tmp/e"
[ $? = 4 ] && ok "cnlab server ssh to an unknown server: exit 4" || bad "server ssh, unknown: $(cat "$tmp/e")"
as carl server stop cnb >/dev/null 2>&1

# --- revocation ---------------------------------------------------------------------
as ana ssh-key add "$tmp/keys/ana2.pub" --name second >/dev/null 2>&1 || bad "second key"
# ended PID: wait for the session's ssh to end: its code in $rc, or
# "alive".
ended() {
	rc=alive
	for _ in $(seq 300); do
		kill -0 "$1" 2>/dev/null || {
			wait "$1"
			rc=$?
			return
		}
		sleep 0.1
	done
}
S ana cnlab-nb 'echo started; sleep 600' >"$tmp/live.out" 2>"$tmp/live.err" &
live=$!
for _ in $(seq 200); do grep -q started "$tmp/live.out" && break; sleep 0.1; done
as ana ssh-key remove ana-laptop >"$tmp/o" 2>&1 || bad "remove: $(cat "$tmp/o")"
ended $live
[ "$rc" != alive ] && grep -q 'ended' "$tmp/live.err" &&
	ok "removing the key closes the open session (ssh exit $rc, cnlab says why)" ||
	{
		bad "session survived key removal: $rc $(cat "$tmp/live.err")"
		kill $live 2>/dev/null
	}
# What the cut session ran is hung up, as a terminal's would be.
left=1
for _ in $(seq 100); do
	left=$(as ana server exec nb -- sh -c 'for f in /proc/[0-9]*/cmdline; do tr "\0" " " <"$f"; echo; done 2>/dev/null | grep -c "^sleep 600"')
	[ "$left" = 0 ] && break
	sleep 0.1
done
[ "$left" = 0 ] && ok "the cut session's processes are hung up (no sleep 600 left in the container)" ||
	bad "left in the container: $left"
S ana cnlab-nb true >/dev/null 2>"$tmp/e"
[ $? = 255 ] && grep -q 'Permission denied (publickey)' "$tmp/e" &&
	ok "the removed key is refused on the next connection" || bad "removed key: $(cat "$tmp/e")"
[ "$(S ana2 cnlab-nb 'echo still')" = still ] && ok "the other key still works" || bad "second key refused"
S ana2 cnlab-nb 'echo started; sleep 600' >"$tmp/live.out" 2>"$tmp/live.err" &
live=$!
for _ in $(seq 200); do grep -q started "$tmp/live.out" && break; sleep 0.1; done
cnlab user disable ana >/dev/null 2>&1 || bad "disable"
ended $live
[ "$rc" != alive ] && ok "disabling the user closes the open session" ||
	{
		bad "session survived disable"
		kill $live 2>/dev/null
	}
S ana2 cnlab-nb true >/dev/null 2>"$tmp/e"
[ $? = 255 ] && ok "a disabled user's next connection is refused" || bad "disabled user connected"
cnlab user enable ana >/dev/null 2>&1
echo "ana-password-1" | as ana login --server "$url" --user ana --password-stdin >/dev/null 2>&1

# --- an image without sshd gets the node's --------------------------------------------
img=/var/cache/cnlab/images/debian-12-python.tar
if [ -s "$img" ]; then
	cnlab image import "$img" --name debian:12 >/dev/null 2>&1 || bad "image import"
	as ana server create --name deb --image debian:12 --profile h100-25pct >"$tmp/o" 2>&1 ||
		bad "image server: $(cat "$tmp/o")"
	as ana server ssh-config deb >"$tmp/deb.cfg"
	got=$(CNLAB_CONFIG=$tmp/ana.json timeout 120 ssh -F "$tmp/deb.cfg" -i "$tmp/keys/ana2" -o IdentitiesOnly=yes \
		-o BatchMode=yes cnlab-deb 'test -e /usr/sbin/sshd && echo has-sshd; . /etc/os-release; echo $ID; id -un' 2>"$tmp/e")
	[ "$got" = "$(printf 'debian\nana')" ] &&
		ok "an image without sshd: the node's sshd runs in the container, as the tenant" ||
		bad "image sshd: '$got' $(cat "$tmp/e")"
	as ana server stop deb >/dev/null 2>&1
else
	bad "no $img (scripts/bootstrap builds it)"
fi

# --- a node lost mid-session ------------------------------------------------------------
start_remote() {
	touch "$tmp/remote.err"
	CNLAB_AGENT_TOKEN=$(cnlab node join-token --node remote -o json | jq -r .token) \
		"$agent" --server "$url" --name remote --gpus fake:1xA100-80GB \
		--work-dir "$tmp/remote" >>"$tmp/remote.out" 2>>"$tmp/remote.err" &
	remote=$!
}
start_remote
for _ in $(seq 100); do grep -q msg=registered "$tmp/remote.err" && break; sleep 0.1; done
as ana server create --name far --image host --profile a100-50pct >"$tmp/o" 2>&1 ||
	bad "server on the second node: $(cat "$tmp/o")"
as ana server ssh-config far >"$tmp/far.cfg"
F() {
	CNLAB_CONFIG=$tmp/ana.json timeout 120 ssh -F "$tmp/far.cfg" -i "$tmp/keys/ana2" \
		-o IdentitiesOnly=yes -o BatchMode=yes -o LogLevel=ERROR "$@"
}
[ "$(F cnlab-far 'echo $CNLAB_JOB_ID')" = "$(as ana server show far -o json | jq -r .id)" ] &&
	ok "ssh to a server on another node (through its agent's tunnel)" || bad "far ssh"
F cnlab-far 'echo started; sleep 600' >"$tmp/live.out" 2>"$tmp/live.err" &
live=$!
for _ in $(seq 200); do grep -q started "$tmp/live.out" && break; sleep 0.1; done
kill -9 "$remote"
wait "$remote" 2>/dev/null
remote=
ended $live
[ "$rc" = 255 ] && grep -q 'ssh connection to server far ended' "$tmp/live.err" &&
	ok "the node lost mid-session: the session ends with a message" ||
	{
		bad "node loss: rc=$rc $(cat "$tmp/live.err")"
		kill $live 2>/dev/null
	}
start_remote
got=
for _ in $(seq 60); do
	got=$(F cnlab-far 'echo back' 2>/dev/null) && [ "$got" = back ] && break
	sleep 1
done
[ "$got" = back ] && ok "once the node is back, ssh works again" || bad "reconnect: '$got'"
# A clean stop and start of the agent (which adopts the running server):
# the server's session files stay reachable.
kill -TERM "$remote"
wait "$remote" 2>/dev/null
remote=
start_remote
got=
for _ in $(seq 60); do
	got=$(F cnlab-far 'echo again' 2>/dev/null) && [ "$got" = again ] && break
	sleep 1
done
[ "$got" = again ] && ok "after the agent is stopped and started, ssh works again" ||
	bad "after a clean restart: '$got' $(F cnlab-far true 2>&1 | tail -2)"
as ana server stop far >/dev/null 2>&1

# --- the idle session, 5 minutes on -------------------------------------------------------
grep -q '^ready$' "$tmp/idle.out" || bad "the idle session never started: $(cat "$tmp/idle.err")"
# (CNL_TEST_SSH_IDLE_S shortens it for a quick local run; CI keeps 300.)
while [ $(($(date +%s) - idle_t0)) -lt "${CNL_TEST_SSH_IDLE_S:-300}" ]; do sleep 5; done
echo yes >&7
for _ in $(seq 300); do
	grep -q '^alive-yes$' "$tmp/idle.out" && break
	sleep 0.1
done
grep -q '^alive-yes$' "$tmp/idle.out" &&
	ok "a session idle for $(($(date +%s) - idle_t0)) s (no keep-alives) still answers" ||
	bad "idle session: $(cat "$tmp/idle.out" "$tmp/idle.err")"
exec 7>&-
kill "$idle" 2>/dev/null
wait "$idle" 2>/dev/null
as bob server stop bobs >/dev/null 2>&1

# --- audit, the database, what is left ----------------------------------------------------
cnlab audit --limit 1000 -o json >"$tmp/audit.json" 2>&1
bob_id=$(cnlab user list -o json | jq -r '.items[] | select(.name == "bob") | .id')
for a in server.ssh ssh_key.add ssh_key.remove; do
	jq -e --arg a $a '.items[] | select(.action == $a)' "$tmp/audit.json" >/dev/null ||
		bad "no $a audit record"
done
jq -e --arg bob "$bob_id" '.items[] | select(.action == "server.ssh" and .actor == $bob and (.result | startswith("403")))' \
	"$tmp/audit.json" >/dev/null && ok "audit: server.ssh (the refusals too), ssh_key.add, ssh_key.remove" ||
	bad "audit: $(jq -c '[.items[] | select(.action | startswith("server.ssh")) | {actor, result}]' "$tmp/audit.json")"
if cat "$tmp/data/"*.db* 2>/dev/null | grep -aq 'OPENSSH PRIVATE KEY'; then
	bad "a host key is in the database in clear"
else
	ok "no host key in the database in clear (sealed under the secrets key)"
fi
left=
for _ in $(seq 100); do
	left=$(pgrep -f 'sshd -i -e -f /run/cnlab/ssh' || true)
	[ -z "$left" ] && break
	sleep 0.1
done
[ -z "$left" ] && ok "no sshd left once the sessions ended" || bad "sshd left: $(ps -o pid,args -p "$left")"

if [ $fails -gt 0 ]; then
	echo "$fails check(s) failed"
	exit 1
fi
echo "all ssh checks passed"
