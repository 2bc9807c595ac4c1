#!/usr/bin/env bash
# artifacts.sh - a job's files and output end to end: a real cnlabd on
# loopback (real SQLite), a real cnlab-agent on a fake GPU pool, and the
# cnlab CLI, all started under umask 000:
#   - an input of several MiB (the script itself) and a 5 MiB random
#     artifact round-trip with matching SHA-256; names with spaces and
#     non-ASCII characters, in subfolders, come back where they were;
#   - output bytes (UTF-8 and bytes that are not) come back exactly, from
#     cnlab run and from cnlab jobs logs;
#   - the attack: a job links /etc/shadow into its artifacts (and /etc
#     through a subfolder link, and a FIFO): nothing of the target reaches
#     cnlabd or the user, and the job fails naming the file;
#   - an artifact past artifacts_max_bytes and an input past
#     inputs_max_bytes fail naming the file and the limit; a project's
#     uploads waiting for a job are bounded;
#   - the job's folder is 0700 while it runs and gone once it ended;
#     cnlabd's data directory is 0700 and its files 0600.
set -u
cnlabd=$1
agent=$2
cnlab=$3
umask 000
tmp=$(mktemp -d)
run=art$$
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	for d in /sys/fs/cgroup/*/cnlab/$run-* /sys/fs/cgroup/cnlab/$run-*; do
		[ -d "$d" ] || continue
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null |
			xargs -r kill -9 2>/dev/null
		sleep 0.3
		find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
wait_for() {
	local n=$(($1 * 5))
	shift
	for _ in $(seq "$n"); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG XDG_CONFIG_HOME
export CNLAB_JWT_SECRET=artifacts-integration-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
"$cnlabd" --data-dir "$tmp/db" --listen 127.0.0.1:0 --bootstrap-admin root \
	--cycle-interval 200ms --artifacts-max-bytes 8mib \
	--inputs-max-bytes 16mib >"$tmp/cnlabd.out" 2>"$tmp/cnlabd.err" &
pids+=($!)
wait_for 10 grep -q '^listening on' "$tmp/cnlabd.out" || {
	cat "$tmp/cnlabd.err"
	exit 1
}
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd.out")
base=http://127.0.0.1:$port
api() { # api METHOD PATH TOKEN [BODY]
	curl -sS -X "$1" -H "Authorization: Bearer $3" ${4:+-d "$4"} "$base$2"
}
login() { curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$base/v1/auth/login" | jq -r .token; }
root=$(login root admin-password-1)
sys=$(api GET /v1/projects "$root" | jq -r '.items[] | select(.name=="system") | .id')
# Each agent joins with a one-time join token made for its node name.
jointok() { api POST /v1/nodes/join-tokens "$root" "{\"node\":\"$1\"}" | jq -r .token; }
api POST /v1/users "$root" '{"name":"ana","password":"ana-password-1"}' >/dev/null
proj=$(api POST /v1/projects "$root" '{"name":"lab"}' | jq -r .id)
api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null
ana=$(login ana ana-password-1)

CNLAB_AGENT_TOKEN=$(jointok "$run-a") "$agent" --server "$base" --name "$run-a" \
	--gpus fake:1xH100-80GB-SXM --work-dir "$tmp/agent" --cpu-milli 8000 \
	--mem-mib 16384 --log-level info >"$tmp/agent.out" 2>"$tmp/agent.err" &
pids+=($!)
wait_for 10 grep -q 'msg=registered' "$tmp/agent.err" ||
	bad "agent did not register: $(cat "$tmp/agent.err")"

export CNLAB_CONFIG=$tmp/cli.json
echo ana-password-1 | "$cnlab" login --server "$base" --user ana --password-stdin \
	>/dev/null 2>"$tmp/login.err" || bad "login: $(cat "$tmp/login.err")"

state() { api GET "/v1/jobs/$1" "$ana" | jq -r .state; }
final() { case $(state "$1") in succeeded | failed | cancelled) return 0 ;; esac; return 1; }
submit() { api POST "/v1/projects/$proj/jobs" "$ana" "$(jq -cn --arg c "$1" '{command:$c,gpu:"h100-10"}')" | jq -r .id; }

# --- several MiB in and out, names of any kind, bytes exactly ---------------
# The script is the input: a few lines, then 6 MiB it never reads.
expected=$tmp/expected.out
printf 'h\303\251llo w\303\266rld \342\234\223\n\377\376 not UTF-8 \300\n' >"$expected"
{
	cat <<'SCRIPT'
set -e
a=$CNLAB_ARTIFACTS_DIR
sha256sum "$0" | cut -d' ' -f1 >"$a/input.sha256"
head -c 5242880 /dev/urandom >"$a/random.bin"
sha256sum "$a/random.bin" | cut -d' ' -f1 >"$a/random.sha256"
mkdir -p "$a/sub dir/ünïcødé"
echo nested >"$a/sub dir/ünïcødé/résumé 1.txt"
echo spaced >"$a/with  two spaces.txt"
echo $(stat -c %a . "$a") >"$a/modes.txt"
printf 'h\303\251llo w\303\266rld \342\234\223\n\377\376 not UTF-8 \300\n'
exit 0
SCRIPT
	head -c 4800000 /dev/urandom | base64
} >"$tmp/big input.sh"
insha=$(sha256sum "$tmp/big input.sh" | cut -d' ' -f1)
[ "$(stat -c %s "$tmp/big input.sh")" -gt 6000000 ] || bad "input is not several MiB"
"$cnlab" run "$tmp/big input.sh" --gpu h100-10 --artifacts "$tmp/out" \
	>"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
[ $rc = 0 ] && ok "cnlab run of a 6 MiB script succeeded" ||
	bad "run: rc=$rc $(cat "$tmp/run.err")"
[ "$(cat "$tmp/out/input.sha256" 2>/dev/null)" = "$insha" ] &&
	ok "the input arrived whole (SHA-256 matches)" ||
	bad "input sha: $(cat "$tmp/out/input.sha256" 2>/dev/null) != $insha"
[ "$(stat -c %s "$tmp/out/random.bin" 2>/dev/null)" = 5242880 ] &&
	[ "$(sha256sum <"$tmp/out/random.bin" | cut -d' ' -f1)" = "$(cat "$tmp/out/random.sha256")" ] &&
	ok "a 5 MiB artifact came back (SHA-256 matches)" ||
	bad "random.bin: $(ls -l "$tmp/out" 2>&1)"
[ "$(cat "$tmp/out/sub dir/ünïcødé/résumé 1.txt" 2>/dev/null)" = nested ] &&
	[ "$(cat "$tmp/out/with  two spaces.txt" 2>/dev/null)" = spaced ] &&
	ok "names with spaces and non-ASCII, in subfolders, came back" ||
	bad "names: $(find "$tmp/out")"
[ "$(cat "$tmp/out/modes.txt" 2>/dev/null)" = "700 700" ] &&
	ok "the job's folders are 0700 under umask 000" ||
	bad "job folder modes: $(cat "$tmp/out/modes.txt" 2>/dev/null)"
cmp -s "$tmp/run.out" "$expected" && ok "cnlab run: output bytes exactly" ||
	bad "run output: $(od -c "$tmp/run.out" | head -5)"
job=$(sed -n 's/.*Queued \(job_[A-Za-z0-9]*\).*/\1/p' "$tmp/run.err")
"$cnlab" jobs logs "$job" >"$tmp/logs.out" 2>"$tmp/logs.err"
cmp -s "$tmp/logs.out" "$expected" && ok "cnlab jobs logs: output bytes exactly" ||
	bad "logs ($job): $(od -c "$tmp/logs.out" | head -5) $(cat "$tmp/logs.err")"
wait_for 10 test ! -e "$tmp/agent/jobs/$job" &&
	ok "the job's folder is gone once it ended" ||
	bad "job folder left: $(ls -la "$tmp/agent/jobs/$job" 2>&1 | head -3)"

# --- the attack: links out of the artifacts folder ----------------------------
secret=$(head -1 /etc/shadow)
[ -n "$secret" ] || bad "no /etc/shadow line to look for"
j=$(submit 'a=$CNLAB_ARTIFACTS_DIR; ln -s /etc/shadow "$a/shadow"; mkdir "$a/sub"; ln -s /etc "$a/sub/etc"; ln -s / "$a/root"; mkfifo "$a/pipe"; echo fine >"$a/ok.txt"; echo ran')
wait_for 60 final "$j" || bad "link job did not end"
doc=$(api GET "/v1/jobs/$j" "$ana")
[ "$(jq -r .state <<<"$doc")" = failed ] &&
	jq -r .message <<<"$doc" | grep -Eq '^artifact "(shadow|root|sub/etc|pipe)": .*not collected \(and 3 more\)$' &&
	ok "a job with links in its artifacts fails naming the file" ||
	bad "link job: $doc"
n=0
for f in shadow root sub/etc; do
	grep "id=$j .*file=$f err=\"a symbolic link" "$tmp/agent.err" | grep -q 'not collected' && n=$((n + 1))
done
[ $n = 3 ] && grep "id=$j .*file=pipe " "$tmp/agent.err" | grep -q 'a FIFO' &&
	ok "each link and the FIFO named as not collected" ||
	bad "not collected: $(grep 'not collected' "$tmp/agent.err")"
leak=0
for p in $(api GET "/v1/jobs/$j/artifacts" "$ana" | jq -r '.items[].path | @uri'); do
	curl -sS -H "Authorization: Bearer $ana" "$base/v1/jobs/$j/artifact?path=$p" |
		grep -qF "$secret" && leak=1
done
grep -rqF "$secret" "$tmp/db" && leak=1
[ $leak = 0 ] && ok "nothing of /etc/shadow reached cnlabd or the user" ||
	bad "the host's shadow file leaked"
[ "$(api GET "/v1/jobs/$j/artifacts" "$ana" | jq -r '[.items[].path] | join(",")')" = ok.txt ] &&
	ok "the job's own files still went" ||
	bad "artifacts: $(api GET "/v1/jobs/$j/artifacts" "$ana")"
# A hard link to the host's file is refused too (where the file system
# lets root make one).
j=$(submit 'ln /etc/shadow "$CNLAB_ARTIFACTS_DIR/hard" && echo linked')
wait_for 60 final "$j" || bad "hard link job did not end"
if api GET "/v1/jobs/$j/logs" "$ana" | jq -r '.items[].data' | grep -q linked; then
	doc=$(api GET "/v1/jobs/$j" "$ana")
	[ "$(jq -r .state <<<"$doc")" = failed ] &&
		jq -r .message <<<"$doc" | grep -q '"hard": a hard link' &&
		! grep -rqF "$secret" "$tmp/db" &&
		ok "a hard link to /etc/shadow is not collected" || bad "hard link: $doc"
else
	ok "a hard link to /etc/shadow cannot be made here (skipped)"
fi

# --- limits ----------------------------------------------------------------
j=$(submit 'head -c 9437184 /dev/zero >"$CNLAB_ARTIFACTS_DIR/huge.bin"')
wait_for 60 final "$j" || bad "huge job did not end"
doc=$(api GET "/v1/jobs/$j" "$ana")
[ "$(jq -r .state <<<"$doc")" = failed ] &&
	jq -r .message <<<"$doc" | grep -q '"huge.bin"' &&
	jq -r .message <<<"$doc" | grep -q 'artifacts_max_bytes' &&
	ok "an artifact over artifacts_max_bytes fails naming file and limit" ||
	bad "huge: $doc"
head -c 17000000 /dev/zero >"$tmp/too big.sh"
"$cnlab" run "$tmp/too big.sh" --gpu h100-10 >/dev/null 2>"$tmp/big.err"
rc=$?
[ $rc != 0 ] && grep -q 'too big.sh' "$tmp/big.err" && grep -q 'inputs_max_bytes' "$tmp/big.err" &&
	ok "an input over inputs_max_bytes is refused naming file and limit" ||
	bad "big input: rc=$rc $(cat "$tmp/big.err")"
# A body that is not what its digest says stores nothing.
printf 'abc' >"$tmp/abc"
st=$(curl -sS -o "$tmp/bad.json" -w '%{http_code}' -X PUT -H "Authorization: Bearer $ana" \
	-H "X-Content-SHA256: $(printf 'abd' | sha256sum | cut -d' ' -f1)" \
	--data-binary @"$tmp/abc" "$base/v1/projects/$proj/uploads?path=x.txt")
[ "$st" = 400 ] && grep -q digest_mismatch "$tmp/bad.json" &&
	ok "an upload whose SHA-256 differs is refused" || bad "digest: $st $(cat "$tmp/bad.json")"
# Uploads waiting for a job are bounded per project (4 x inputs_max_bytes):
# a member cannot fill cnlabd's disk with them.
head -c $((15 << 20)) /dev/zero >"$tmp/15m"
sum15=$(sha256sum "$tmp/15m" | cut -d' ' -f1)
codes=
for i in 1 2 3 4 5; do
	codes="$codes $(curl -sS -o "$tmp/up.json" -w '%{http_code}' -X PUT -H "Authorization: Bearer $ana" \
		-H "X-Content-SHA256: $sum15" --data-binary @"$tmp/15m" \
		"$base/v1/projects/$proj/uploads?path=fill$i")"
done
[ "$codes" = " 201 201 201 201 413" ] && grep -q 'waiting for a job' "$tmp/up.json" &&
	ok "a project's waiting uploads are bounded (4 x 15 MiB taken, the 5th refused)" ||
	bad "upload total: $codes $(cat "$tmp/up.json")"
rm -f "$tmp/15m"

# A path with a NUL byte is refused, not cut short to another name.
st=$(curl -sS -o "$tmp/nul.json" -w '%{http_code}' -X PUT -H "Authorization: Bearer $ana" \
	-H "X-Content-SHA256: $(printf 'abc' | sha256sum | cut -d' ' -f1)" \
	--data-binary @"$tmp/abc" "$base/v1/projects/$proj/uploads?path=a%00b")
[ "$st" = 400 ] && grep -q 'path' "$tmp/nul.json" &&
	ok "a path with a NUL byte is refused" || bad "NUL path: $st $(cat "$tmp/nul.json")"

# --- cnlabd's data files, under umask 000 -------------------------------------
[ "$(stat -c %a "$tmp/db")" = 700 ] && ok "data directory 0700" ||
	bad "data dir $(stat -c %a "$tmp/db")"
loose=$(find "$tmp/db" -type f ! -perm 600 -printf '%p %m\n')
[ -z "$loose" ] && [ -f "$tmp/db/cnlab.db" ] && ok "every data file 0600 (database, WAL, job files)" ||
	bad "loose data files: $loose"
loose=$(find "$tmp/db" -mindepth 1 -type d ! -perm 700 -printf '%p %m\n')
[ -z "$loose" ] && ok "every data folder 0700" || bad "loose folders: $loose"

[ "$fails" = 0 ] || {
	echo "--- cnlabd"; tail -20 "$tmp/cnlabd.err"
	echo "--- agent"; tail -30 "$tmp/agent.err"
	exit 1
}
