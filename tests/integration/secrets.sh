#!/usr/bin/env bash
# secrets.sh - cnlab secret set|list|delete against a real cnlabd (the
# all-in-one, and plain cnlabd for its key file), typed with the real CLI,
# and tried the way a curious tenant and a thief of the database would:
#   - cnlabd refuses a key file others may read, one inside the data
#     directory, a link, and one that is not 64 hex digits; without a key
#     the secret routes say that secrets are off and how to turn them on
#   - the all-in-one makes its key in the user's config folder, 0600,
#     not in the data directory
#   - set from a file and from stdin; list shows names, never values; the
#     value is in no API reply, in no log line, in no audit record, and not
#     in the database file (neither as text nor as its base64)
#   - a user's secrets are theirs alone; a project's are set by its admins
#     and listed by its members; another project sees neither
#   - bad names, a value on the command line, an oversized value, bad
#     base64 and unknown fields are refused naming the problem, and what
#     was stored before is kept
#   - cnlab run --secret and --secret-env, server create --secret: files
#     under /run/secrets on a tmpfs, 0400 and 0500, the tenant's,
#     read-only; a variable only when asked, never LD_* or CNLAB_*; the
#     node's fetch audited as secret.use; gone from the node after the
#     job; no other user's secret can be named; one deleted before its
#     job starts fails the job naming it; a server gets a secret set
#     again at its next start; a server holding its owner's own secrets
#     is its owner's alone (no member, no administrator opens it, runs a
#     command in it or sees its token); no value is on any disk
#   - a secret as a file is in no process's environment (/proc/*/environ
#     inside the container and on the node)
#   - an agent before node protocol 8 is sent no secrets (cnlabd warns);
#     a fetch under a stale epoch is fenced, a user's token refused
#   - deleting a project deletes its secrets
#   - a restart with the same key keeps every secret
#   - cloud credentials (cnlab cloud add --access-key-id
#     --secret-from-file): sealed the same way, in no list, log, audit
#     record or database file; a bad key id, a key id without its
#     secret, a member adding an account, and no key are each refused
set -u
cnlabd=$1
cnlab=$2
tmp=$(mktemp -d)
chmod 755 "$tmp"
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
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

# --- plain cnlabd: the key file ---------------------------------------------------
key=$tmp/keys/secrets.key
mkdir -m 700 "$tmp/keys"
printf '%064x\n' 0 | tr 0 a >"$key" # 64 hex digits
chmod 600 "$key"
try_key() { # try_key FILE: cnlabd's exit code and stderr, started with it
	CNLAB_JWT_SECRET=integration-test-secret-0123456789abcdef \
		timeout 20 "$cnlabd" --data-dir "$tmp/plain" --listen 127.0.0.1:0 \
		--secrets-key-file "$1" >"$tmp/plain.out" 2>"$tmp/plain.err" &
	local p=$! rc
	for _ in $(seq 100); do
		grep -q '^listening on' "$tmp/plain.out" && break
		kill -0 $p 2>/dev/null || break
		sleep 0.05
	done
	if grep -q '^listening on' "$tmp/plain.out"; then
		rc=up
	else
		wait $p
		rc=$?
	fi
	kill $p 2>/dev/null
	wait $p 2>/dev/null
	echo "$rc"
}
chmod 644 "$key"
rc=$(try_key "$key")
[ "$rc" != up ] && [ "$rc" != 0 ] && grep -q 'mode 644 lets others read' "$tmp/plain.err" &&
	ok "a key file others may read is refused, naming its mode" ||
	bad "key 0644: rc=$rc $(cat "$tmp/plain.err")"
chmod 600 "$key"
mkdir -p -m 700 "$tmp/plain"
cp "$key" "$tmp/plain/secrets.key"
rc=$(try_key "$tmp/plain/../plain/secrets.key")
[ "$rc" != up ] && [ "$rc" != 0 ] && grep -q 'inside the data directory' "$tmp/plain.err" &&
	ok "a key file inside the data directory is refused" || bad "key in data dir: rc=$rc $(cat "$tmp/plain.err")"
ln -s "$key" "$tmp/keys/link.key"
rc=$(try_key "$tmp/keys/link.key")
[ "$rc" != up ] && [ "$rc" != 0 ] && grep -q 'secrets_key_file' "$tmp/plain.err" &&
	ok "a key file that is a link is refused" || bad "key link: rc=$rc $(cat "$tmp/plain.err")"
echo 0123abcd >"$tmp/keys/short.key"
chmod 600 "$tmp/keys/short.key"
rc=$(try_key "$tmp/keys/short.key")
[ "$rc" != up ] && [ "$rc" != 0 ] && grep -q '64 hexadecimal digits' "$tmp/plain.err" &&
	ok "a key that is not 64 hex digits is refused" || bad "short key: rc=$rc $(cat "$tmp/plain.err")"
rc=$(try_key "$key")
[ "$rc" = up ] &&
	ok "a good key file outside the data directory starts cnlabd" || bad "good key: rc=$rc $(cat "$tmp/plain.err")"

# --- the all-in-one ---------------------------------------------------------------
# One port for both starts: the CLI keeps its token for the server it
# logged in to.
aio_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_aio() {
	: >"$tmp/out"
	HOME=$tmp/home "$cnlabd" --all-in-one --data-dir "$tmp/data" "$@" \
		--listen "127.0.0.1:$aio_port" --gpus fake:1xH100-80GB-SXM >"$tmp/out" 2>>"$tmp/err" &
	pid=$!
	for _ in $(seq 200); do
		grep -q 'CNLab is running' "$tmp/out" && break
		sleep 0.1
	done
	url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
}
stop_aio() {
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	pid=
}
start_aio
[ -n "$url" ] || {
	echo "FAIL start: $(cat "$tmp/err")"
	exit 1
}
[ "$(stat -c %a "$tmp/home/.config/cnlab/secrets.key" 2>/dev/null)" = 600 ] &&
	[ ! -e "$tmp/data/secrets.key" ] &&
	ok "the all-in-one made its key in ~/.config/cnlab (0600), not in the data directory" ||
	bad "aio key: $(ls -la "$tmp/home/.config/cnlab" "$tmp/data" 2>&1)"

cnlab() { CNLAB_CONFIG=$tmp/admin.json "$cnlab" "$@"; }
as() { # as USER ARGS...
	local u=$1
	shift
	CNLAB_CONFIG=$tmp/$u.json "$cnlab" "$@"
}
cnlab login --server "$url" --user admin --password-stdin <"$tmp/data/admin.password" >/dev/null 2>&1 ||
	bad "admin login"
cnlab project create vision >/dev/null 2>&1
for u in ana bob carl; do
	echo "$u-password-1" | cnlab user create $u --password-stdin >/dev/null 2>&1
done
cnlab project member add default ana --role project-admin >/dev/null 2>&1
cnlab project member add default bob >/dev/null 2>&1
cnlab project member add vision carl >/dev/null 2>&1
for u in ana bob carl; do
	echo "$u-password-1" | as $u login --server "$url" --user $u --password-stdin >/dev/null 2>&1 ||
		bad "$u login"
done

# Values: printable, with a newline, and binary.
printf 'ana-TOPSECRET-7f3a\n' >"$tmp/ana.txt"
head -c 4096 /dev/urandom >"$tmp/bin"
as ana secret set db-password --from-file "$tmp/ana.txt" >"$tmp/o" 2>&1
[ $? = 0 ] && grep -q '^✓ Secret db-password set (user, 19 bytes)$' "$tmp/o" &&
	ok "cnlab secret set NAME --from-file" || bad "set from file: $(cat "$tmp/o")"
printf 'project-TOPSECRET-c0ffee' | as ana secret set wandb-key --from-stdin --scope project >"$tmp/o" 2>&1
[ $? = 0 ] && grep -q 'Secret wandb-key set (project, 24 bytes)' "$tmp/o" &&
	ok "a project admin sets a project secret from stdin" || bad "project set: $(cat "$tmp/o")"
as ana secret set blob --from-file "$tmp/bin" >/dev/null 2>&1 && ok "a binary value" || bad "binary value"

as ana secret list >"$tmp/o" 2>&1
grep -Eq '^db-password +user +19 +ana ' "$tmp/o" && grep -Eq '^blob +user +4096 ' "$tmp/o" &&
	! grep -q wandb-key "$tmp/o" && ok "secret list: the user's own, names and sizes" ||
	bad "list: $(cat "$tmp/o")"
as bob secret list --scope project >"$tmp/o" 2>&1
grep -Eq '^wandb-key +project +24 +ana ' "$tmp/o" &&
	ok "a project member lists the project's secrets" || bad "bob project list: $(cat "$tmp/o")"

# Nobody else sees a user's secrets, not even the administrator.
for who in bob carl admin; do
	out=$( [ $who = admin ] && cnlab secret list -o json || as $who secret list -o json)
	[ "$(echo "$out" | jq '.items | length')" = 0 ] || bad "$who sees ana's secrets: $out"
done
ok "another user (the admin too) sees none of ana's secrets"
as carl secret list --scope project --project default >"$tmp/o" 2>&1
rc=$?
[ $rc != 0 ] && ! grep -q wandb "$tmp/o" && ok "another project's member cannot list them (exit $rc)" ||
	bad "carl lists default's secrets: $(cat "$tmp/o")"
printf 'x' | as bob secret set wandb-key --from-stdin --scope project >"$tmp/o" 2>&1
rc=$?
[ $rc = 3 ] || [ $rc = 5 ] && ok "a plain member cannot set a project secret (exit $rc)" ||
	bad "bob sets a project secret: rc=$rc $(cat "$tmp/o")"
as bob secret delete wandb-key --scope project >"$tmp/o" 2>&1
rc=$?
[ $rc != 0 ] && as ana secret list --scope project | grep -q wandb-key &&
	ok "a plain member cannot delete one (exit $rc); it is kept" || bad "bob deleted: rc=$rc $(cat "$tmp/o")"
as bob secret delete db-password >"$tmp/o" 2>&1
[ $? = 4 ] && as ana secret list | grep -q db-password &&
	ok "another user deleting ana's secret by name: not found, and it is kept" ||
	bad "bob deletes ana's: $(cat "$tmp/o")"

# Bad input.
as ana secret set 'a/b' --from-stdin </dev/null >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q "secret name a/b" "$tmp/o" && ok "a bad name: usage, named" || bad "bad name: $(cat "$tmp/o")"
as ana secret set .hidden --from-stdin </dev/null >/dev/null 2>&1
[ $? = 2 ] && ok "a name starting with '.': usage" || bad "dot name"
as ana secret set tok hunter2 >"$tmp/o" 2>&1
[ $? = 2 ] && ok "a value on the command line is refused" || bad "value as argument: $(cat "$tmp/o")"
as ana secret set tok >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q -- '--from-file FILE or --from-stdin' "$tmp/o" && ok "no value: usage naming both flags" ||
	bad "no value: $(cat "$tmp/o")"
head -c 65537 /dev/zero >"$tmp/big"
as ana secret set db-password --from-file "$tmp/big" >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q '64 KiB' "$tmp/o" && ok "a value over 64 KiB: usage, the limit named" ||
	bad "big: $(cat "$tmp/o")"
as ana secret set db-password --from-file "$tmp/nonexistent" >/dev/null 2>&1
[ $? = 2 ] && ok "a missing file: usage" || bad "missing file"
as ana secret set x --from-stdin --scope team </dev/null >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q -- '--scope' "$tmp/o" && ok "a bad --scope: usage" || bad "scope: $(cat "$tmp/o")"
as ana secret list -o json | jq -e '.items[] | select(.name=="db-password") | .size == 19' >/dev/null &&
	ok "after the refusals, the stored value is unchanged (19 bytes)" || bad "db-password changed"
# The API itself, as a script would call it.
atok=$(jq -r .token "$tmp/ana.json")
api() { curl -sS -o "$tmp/api.out" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $atok" ${3:+-d "$3"} "$url$2"; }
code=$(api PUT /v1/secrets/x '{"value_base64":"not base64!"}')
[ "$code" = 400 ] && grep -q value_base64 "$tmp/api.out" && ok "API: bad base64 is a 400 naming the field" ||
	bad "bad b64: $code $(cat "$tmp/api.out")"
code=$(api PUT /v1/secrets/x '{"value_base64":"eA==","value":"x"}')
[ "$code" = 400 ] && jq -r .error.message "$tmp/api.out" | grep -q 'field "value"' && ok "API: an unknown field is a 400 naming it" ||
	bad "unknown field: $code $(cat "$tmp/api.out")"
big=$(head -c 65537 /dev/zero | base64 -w0)
code=$(api PUT /v1/secrets/x "{\"value_base64\":\"$big\"}")
[ "$code" = 413 ] && ok "API: a value over 64 KiB is a 413" || bad "api big: $code $(cat "$tmp/api.out")"
code=$(api PUT /v1/secrets/..%2Fx '{"value_base64":"eA=="}')
[ "${code:0:1}" = 4 ] && ok "API: a name that walks a path is refused ($code)" || bad "api path: $code"

# The value is nowhere it should not be.
b64=$(base64 -w0 "$tmp/ana.txt")
leaks=
for f in "$tmp/data"/cnlab.db*; do
	grep -q -a TOPSECRET "$f" && leaks="$leaks $f(text)"
	grep -q -a -F "$b64" "$f" && leaks="$leaks $f(base64)"
done
grep -q TOPSECRET "$tmp/err" "$tmp/out" && leaks="$leaks log"
for who in ana bob; do
	as $who secret list -o json | grep -q TOPSECRET && leaks="$leaks list"
	as $who secret list --scope project -o json | grep -q -e TOPSECRET -e "$b64" && leaks="$leaks project-list"
done
cnlab audit --limit 1000 -o json >"$tmp/audit" 2>&1
grep -q -e TOPSECRET -e "$b64" "$tmp/audit" && leaks="$leaks audit"
[ -z "$leaks" ] && ok "the value is not in the database, the logs, any reply or the audit" ||
	bad "leaked:$leaks"
grep -q 'secret.set' "$tmp/audit" && grep -q 'secret:user:ana/db-password' "$tmp/audit" &&
	grep -q 'secret:default/wandb-key' "$tmp/audit" &&
	ok "the audit names each set secret" || bad "audit: $(grep secret "$tmp/audit")"

# Cloud credentials (issue 23): sealed like secrets, typed with the CLI.
printf 'wJalrXUtnFEMI/K7MDENG+cnlabCLOUDSECRET\n' >"$tmp/aws.secret"
cnlab cloud add aws --account 123456789012 --region us-east-1 --instance-types p5.48xlarge \
	--access-key-id AKIAIOSFODNN7EXAMPLE --secret-from-file "$tmp/aws.secret" >"$tmp/o" 2>&1
rc=$?
[ $rc = 0 ] && grep -q 'credentials sealed' "$tmp/o" &&
	ok "cloud add --access-key-id --secret-from-file: sealed" || bad "cloud add creds: rc=$rc $(cat "$tmp/o")"
cnlab cloud list -o json >"$tmp/clist" 2>&1
cloud_b64=$(printf 'wJalrXUtnFEMI/K7MDENG+cnlabCLOUDSECRET' | base64 -w0)
leaks=
grep -q -e cnlabCLOUDSECRET -e credentials_sealed "$tmp/clist" && leaks="$leaks list"
grep -q AKIAIOSFODNN7EXAMPLE "$tmp/clist" || leaks="$leaks list-lacks-key-id"
for f in "$tmp/data"/cnlab.db*; do
	grep -q -a cnlabCLOUDSECRET "$f" && leaks="$leaks $f(text)"
	grep -q -a -F "$cloud_b64" "$f" && leaks="$leaks $f(base64)"
done
grep -q cnlabCLOUDSECRET "$tmp/err" "$tmp/out" && leaks="$leaks log"
cnlab audit --limit 1000 -o json 2>&1 | grep -q cnlabCLOUDSECRET && leaks="$leaks audit"
[ -z "$leaks" ] && ok "the cloud secret is not in the database, the logs, the list or the audit" ||
	bad "cloud secret leaked:$leaks"
printf 'x\n' | cnlab cloud add aws --account 123456789012 --region us-east-1 --instance-types g5.xlarge \
	--access-key-id akia-lower --secret-from-stdin >"$tmp/o" 2>&1
rc=$?
[ $rc != 0 ] && grep -q 'credentials.access_key_id' "$tmp/o" &&
	ok "cloud add: a malformed access key id is refused naming the field (exit $rc)" ||
	bad "cloud bad key id: rc=$rc $(cat "$tmp/o")"
cnlab cloud add aws --account 123456789012 --region us-east-1 --instance-types g5.xlarge \
	--access-key-id AKIAIOSFODNN7EXAMPLE >"$tmp/o" 2>&1
rc=$?
[ $rc = 2 ] && grep -q 'secret-from-file' "$tmp/o" &&
	ok "cloud add: a key id without its secret is a usage error (exit 2)" ||
	bad "cloud key id alone: rc=$rc $(cat "$tmp/o")"
as ana cloud add aws --account 123456789012 --region us-east-1 --instance-types g5.xlarge \
	--access-key-id AKIAIOSFODNN7EXAMPLE --secret-from-file "$tmp/aws.secret" >"$tmp/o" 2>&1
rc=$?
[ $rc != 0 ] && [ "$(cnlab cloud list -o json | jq '.items | length')" = 1 ] &&
	ok "cloud add: a member cannot add an account (exit $rc)" || bad "cloud add by member: rc=$rc $(cat "$tmp/o")"

# --- secrets in workloads -------------------------------------------------------
# The job proves what it got without printing a value (its output is kept
# by the platform): sha256 of each, modes and owners, the mount.
sha_ana=$(sha256sum <"$tmp/ana.txt" | cut -d' ' -f1)
sha_proj=$(printf 'project-TOPSECRET-c0ffee' | sha256sum | cut -d' ' -f1)
cat >"$tmp/check.sh" <<'CHECK'
echo "uid $(id -u)"
stat -c 'dir %a %u' /run/secrets
for f in /run/secrets/*; do stat -c "file %n %a %u" "$f"; done
echo "db $(sha256sum </run/secrets/db-password | cut -d' ' -f1)"
echo "wandb-file $(sha256sum </run/secrets/wandb-key | cut -d' ' -f1)"
echo "wandb-env $(printf '%s' "$WANDB_API_KEY" | sha256sum | cut -d' ' -f1)"
env | grep -q "ana-TOP""SECRET" && echo "db-in-env"
echo "dir $CNLAB_SECRETS_DIR"
grep ' /run/secrets ' /proc/self/mountinfo | grep -q ' - tmpfs ' && echo "on-tmpfs"
(echo x >/run/secrets/db-password) 2>/dev/null && echo "WROTE-file"
(echo x >/run/secrets/new) 2>/dev/null && echo "WROTE-dir"
true
CHECK
echo 'sleep 600' >"$tmp/hold.sh"
cd "$tmp" || exit 1
as ana run check.sh --gpu h100-25 --secret db-password --secret-env wandb-key=WANDB_API_KEY >"$tmp/run.out" 2>&1
rc=$?
uid=$(sed -n 's/^uid //p' "$tmp/run.out")
[ $rc = 0 ] && grep -q "^db $sha_ana\$" "$tmp/run.out" && grep -q "^wandb-file $sha_proj\$" "$tmp/run.out" &&
	ok "cnlab run --secret: the files under /run/secrets hold the values" || bad "run: rc=$rc $(cat "$tmp/run.out")"
grep -q "^wandb-env $sha_proj\$" "$tmp/run.out" && ! grep -q db-in-env "$tmp/run.out" &&
	ok "--secret-env puts only that one in the environment" || bad "env: $(cat "$tmp/run.out")"
[ -n "$uid" ] && grep -q "^dir 500 $uid\$" "$tmp/run.out" &&
	grep -q "^file /run/secrets/db-password 400 $uid\$" "$tmp/run.out" &&
	grep -q "^file /run/secrets/wandb-key 400 $uid\$" "$tmp/run.out" && grep -q '^on-tmpfs$' "$tmp/run.out" &&
	grep -q '^dir /run/secrets$' "$tmp/run.out" &&
	ok "each file 0400 and the folder 0500, the tenant's (uid $uid), on a tmpfs" || bad "modes: $(cat "$tmp/run.out")"
! grep -q WROTE "$tmp/run.out" && ok "the tenant cannot change or add a secret in the container" ||
	bad "wrote: $(cat "$tmp/run.out")"
if ls -A "$tmp/data/agent/secrets" 2>/dev/null | grep -q .; then
	bad "left on the node: $(ls -la "$tmp/data/agent/secrets")"
else
	ok "after the job its secrets are gone from the node"
fi
cnlab audit --limit 1000 -o json >"$tmp/audit" 2>&1
uses=$(jq -r '.items[] | select(.action == "secret.use") | .target' "$tmp/audit")
grep -q '/db-password' <<<"$uses" && grep -q '/wandb-key' <<<"$uses" &&
	ok "the node's fetch is audited as secret.use, naming both" || bad "no secret.use: $(grep secret "$tmp/audit")"

# Other users: another member may use the project's, not ana's own.
as bob run check.sh --gpu h100-25 --secret db-password >"$tmp/o" 2>&1
rc=$?
[ $rc = 2 ] && grep -q 'no secret "db-password"' "$tmp/o" &&
	ok "another user cannot name ana's own secret (exit 2, named)" || bad "bob uses ana's: rc=$rc $(cat "$tmp/o")"
printf 'bob-own' | as bob secret set db-password --from-stdin >/dev/null 2>&1
as bob run check.sh --gpu h100-25 --secret db-password,wandb-key >"$tmp/o" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "^wandb-file $sha_proj\$" "$tmp/o" &&
	grep -q "^db $(printf 'bob-own' | sha256sum | cut -d' ' -f1)\$" "$tmp/o" &&
	ok "a member gets the project's secret, and their own of the same name as ana's" || bad "bob: rc=$rc $(cat "$tmp/o")"
as carl run check.sh --gpu h100-25 --secret wandb-key >"$tmp/o" 2>&1
rc=$?
[ $rc = 2 ] && ok "another project's member cannot use it (exit 2)" || bad "carl: rc=$rc $(cat "$tmp/o")"
as ana run check.sh --gpu h100-25 --secret-env db-password=LD_PRELOAD >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q LD_ "$tmp/o" && ok "a secret cannot become LD_PRELOAD" || bad "LD_PRELOAD: $(cat "$tmp/o")"
as ana run check.sh --gpu h100-25 --secret-env db-password=CNLAB_REGION >/dev/null 2>&1
[ $? = 2 ] && ok "nor a CNLAB_ variable" || bad "CNLAB_ variable accepted"
as ana run check.sh --gpu h100-25 --secret-env db-password >/dev/null 2>&1
[ $? = 2 ] && ok "--secret-env without =VAR: usage" || bad "secret-env without var"

# A secret deleted while its job waits: the job fails naming it.
as ana run hold.sh --gpu h100 --detach >"$tmp/hold.out" 2>&1
hold=$(grep -o 'job_[0-9A-Z]*' "$tmp/hold.out" | head -1)
for _ in $(seq 300); do
	[ "$(as ana jobs show "$hold" -o json 2>/dev/null | jq -r .state)" = running ] && break
	sleep 0.1
done
printf 'short-lived' | as ana secret set temp --from-stdin >/dev/null 2>&1
as ana run check.sh --gpu h100-25 --secret temp --detach >"$tmp/wait.out" 2>&1
waiting=$(grep -o 'job_[0-9A-Z]*' "$tmp/wait.out" | head -1)
as ana secret delete temp >/dev/null 2>&1
as ana jobs cancel "$hold" >/dev/null 2>&1
st=
for _ in $(seq 600); do
	st=$(as ana jobs show "$waiting" -o json 2>/dev/null | jq -r .state)
	case $st in succeeded | failed | cancelled) break ;; esac
	sleep 0.1
done
msg=$(as ana jobs show "$waiting" -o json 2>/dev/null | jq -r '.message // empty')
[ "$st" = failed ] && echo "$msg" | grep -q 'temp' && echo "$msg" | grep -q 'deleted' &&
	ok "a secret deleted before its job started: the job fails naming it ($msg)" ||
	bad "deleted secret: $st $msg $(as ana jobs show "$waiting" 2>&1)"

# A server gets them too, at each start.
as ana server create --name nb --image host --profile h100-25pct --secret db-password >"$tmp/srv.out" 2>&1
rc=$?
got=$(as ana server exec nb -- sh -c 'sha256sum </run/secrets/db-password' 2>&1 | cut -d' ' -f1)
[ $rc = 0 ] && [ "$got" = "$sha_ana" ] && ok "cnlab server create --secret: the server's /run/secrets" ||
	bad "server: rc=$rc $(cat "$tmp/srv.out") got=$got"
# A file-only secret is in no process's environment: not in the server's
# (every process of its container), not on the node (every process).
inside=$(as ana server exec nb -- sh -c 'cat /proc/[0-9]*/environ 2>/dev/null | tr "\0" "\n" | grep -c "ana-TOP""SECRET"' 2>&1)
host=$(grep -l -a 'ana-TOPSECRET' /proc/[0-9]*/environ 2>/dev/null | head -3)
[ "$inside" = 0 ] && [ -z "$host" ] &&
	ok "a secret as a file is in no /proc/*/environ, inside the container or on the node" ||
	bad "in an environment: inside=$inside host=$host"
# Whoever opens a server can read its files: one that holds its owner's
# own secrets is the owner's alone (the project's members, the
# administrator too, may not open it, run commands in it, or see its
# URL's token, which acts as the owner).
as bob server exec nb -- cat /run/secrets/db-password >"$tmp/o" 2>&1
rc=$?
[ $rc != 0 ] && grep -q "owner's own secrets" "$tmp/o" && ! grep -q TOPSECRET "$tmp/o" &&
	ok "another member cannot exec into a server holding its owner's secrets (exit $rc)" ||
	bad "bob exec: rc=$rc $(cat "$tmp/o")"
cnlab server exec nb --project default -- cat /run/secrets/db-password >"$tmp/o" 2>&1
rc=$?
[ $rc != 0 ] && ! grep -q TOPSECRET "$tmp/o" && ok "nor can the administrator (exit $rc)" ||
	bad "admin exec: rc=$rc $(cat "$tmp/o")"
burl=$(as bob server list -o json | jq -r '.items[] | select(.name=="nb") | .url')
aurl=$(as ana server list -o json | jq -r '.items[] | select(.name=="nb") | .url')
case $aurl in *token=*) ;; *) aurl= ;; esac
[ -n "$aurl" ] && [ -n "$burl" ] && [ "${burl#*token=}" = "$burl" ] &&
	ok "only the owner sees its URL with the token" || bad "urls: ana=$aurl bob=$burl"
btok=$(jq -r .token "$tmp/bob.json")
code=$(curl -sS -o "$tmp/o" -w '%{http_code}' -H "Authorization: Bearer $btok" "${aurl%%\?*}")
[ "$code" = 403 ] && ok "another member's bearer token at the proxy: 403" || bad "bob proxy: $code $(cat "$tmp/o")"
printf 'rotated-TOPSECRET' | as ana secret set db-password --from-stdin >/dev/null 2>&1
as ana server stop nb >/dev/null 2>&1
for _ in $(seq 300); do
	[ "$(as ana server list -o json | jq -r '.items[] | select(.name=="nb") | .state')" = stopped ] && break
	sleep 0.1
done
as ana server start nb >/dev/null 2>&1
got=$(as ana server exec nb -- sh -c 'sha256sum </run/secrets/db-password' 2>&1 | cut -d' ' -f1)
[ "$got" = "$(printf 'rotated-TOPSECRET' | sha256sum | cut -d' ' -f1)" ] &&
	ok "a secret set again reaches the server at its next start" || bad "rotation: got=$got"
# Stopped before it is deleted (a running server cannot be), so that no
# container outlives the test.
as ana server stop nb >/dev/null 2>&1
for _ in $(seq 300); do
	[ "$(as ana server list -o json | jq -r '.items[] | select(.name=="nb") | .state')" = stopped ] && break
	sleep 0.1
done
as ana server delete nb >/dev/null 2>&1 || bad "server delete nb"
printf 'ana-TOPSECRET-7f3a\n' | as ana secret set db-password --from-stdin >/dev/null 2>&1
cd / || exit 1

# An agent of node protocol 7 (before secrets) is sent no "secrets" in its
# assignments (its strict decoder would refuse the whole list, and every
# job of the node would stall); cnlabd says so in its log.
adm=$(jq -r .token "$tmp/admin.json")
jt=$(curl -sS -X POST -H "Authorization: Bearer $adm" -d '{"node":"old7","expires_in_seconds":600}' \
	"$url/v1/nodes/join-tokens" | jq -r .token)
reg=$(curl -sS -X POST -H "Authorization: Bearer $jt" \
	-d '{"protocol":7,"name":"old7","gpu_type":"L40S","gpus":1,"cpu_milli":8000,"mem_mib":16384}' "$url/v1/nodes")
nid=$(echo "$reg" | jq -r .id)
ncred=$(echo "$reg" | jq -r .credential)
cd "$tmp" || exit 1
as ana run check.sh --gpu l40s-10 --secret db-password --detach >"$tmp/old.out" 2>&1
cd / || exit 1
oldjob=$(grep -o 'job_[0-9A-Z]*' "$tmp/old.out" | head -1)
asg=
for _ in $(seq 100); do
	asg=$(curl -sS -H "Authorization: Bearer $ncred" "$url/v1/nodes/$nid/assignments?since=0&wait=0")
	echo "$asg" | jq -e --arg j "$oldjob" '.assignments[] | select(.id == $j)' >/dev/null 2>&1 && break
	sleep 0.1
done
echo "$asg" | jq -e --arg j "$oldjob" '.assignments[] | select(.id == $j) | has("secrets") | not' >/dev/null &&
	grep -q 'a node too old for secrets' "$tmp/err" &&
	ok "an agent before node protocol 8 is sent no secrets; cnlabd warns naming it" ||
	bad "protocol 7: $asg $(grep -i secrets "$tmp/err" | tail -2)"
# The same job's secrets, fetched by that node's credential: no different
# from a protocol 8 node's (the route checks the node and the epoch only).
[ "$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $ncred" \
	"$url/v1/nodes/$nid/secrets?job=$oldjob&epoch=99")" = 409 ] &&
	ok "a fetch under a stale epoch is fenced (409)" || bad "stale epoch fetch"
[ "$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $atok" \
	"$url/v1/nodes/$nid/secrets?job=$oldjob&epoch=1")" = 403 ] &&
	ok "a user's token cannot fetch a workload's secrets (403)" || bad "user fetch"
as ana jobs cancel "$oldjob" >/dev/null 2>&1

# No value is on a disk under the data directory (the agent's included;
# its secrets tmpfs is not a disk).
leaks=$(grep -r -l -a -e TOPSECRET -e "$b64" "$tmp/data" 2>/dev/null | grep -v '/agent/secrets/' | head)
[ -z "$leaks" ] && ok "no value is on a disk under the data directory" || bad "values on disk: $leaks"

# A project's secrets go with the project.
cnlab project create scratch >/dev/null 2>&1
printf 'scratch-value' | cnlab secret set gone-with-it --from-stdin --scope project --project scratch >/dev/null 2>&1
before=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from docs where kind = ? and name = ?", ("secret", "gone-with-it")).fetchone()[0])' "$tmp/data/cnlab.db")
cnlab project delete scratch --yes >/dev/null 2>&1
after=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from docs where kind = ? and name = ?", ("secret", "gone-with-it")).fetchone()[0])' "$tmp/data/cnlab.db")
[ "$before" = 1 ] && [ "$after" = 0 ] && ok "deleting a project deletes its secrets" ||
	bad "project delete: before=$before after=$after"

# A restart with the same key keeps them.
stop_aio
start_aio
names=$(as ana secret list -o json | jq -c '[.items[].name] | sort')
[ "$names" = '["blob","db-password"]' ] &&
	ok "a restart keeps every secret" || bad "after restart: $(as ana secret list 2>&1)"
as ana secret delete blob >"$tmp/o" 2>&1
[ $? = 0 ] && grep -q 'Secret blob deleted' "$tmp/o" && ! as ana secret list | grep -q '^blob ' &&
	ok "cnlab secret delete" || bad "delete: $(cat "$tmp/o") $(tail -5 "$tmp/err")"
stop_aio

# Without a key (plain cnlabd, no secrets_key_file): off, saying how to turn them on.
CNLAB_JWT_SECRET=integration-test-secret-0123456789abcdef CNLAB_ADMIN_PASSWORD=root-password-1 \
	"$cnlabd" --data-dir "$tmp/nokey" --listen 127.0.0.1:0 --bootstrap-admin root \
	>"$tmp/nk.out" 2>"$tmp/nk.err" &
pid=$!
port=
for _ in $(seq 100); do
	port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/nk.out" 2>/dev/null)
	[ -n "$port" ] && break
	sleep 0.05
done
echo root-password-1 | as root login --server "http://127.0.0.1:$port" --user root --password-stdin >/dev/null 2>&1
printf x | as root secret set k --from-stdin >"$tmp/o" 2>&1
rc=$?
[ $rc != 0 ] && grep -q 'secrets_key_file' "$tmp/o" && grep -q 'secrets are off' "$tmp/nk.err" &&
	ok "no key: secrets are off, and the refusal names secrets_key_file (exit $rc)" ||
	bad "no key: rc=$rc $(cat "$tmp/o")"
as root cloud add aws --account 123456789012 --region us-east-1 --instance-types g5.xlarge \
	--access-key-id AKIAIOSFODNN7EXAMPLE --secret-from-file "$tmp/aws.secret" >"$tmp/o" 2>&1
rc=$?
[ $rc != 0 ] && grep -q 'secrets_key_file' "$tmp/o" &&
	ok "no key: cloud credentials are refused, naming secrets_key_file (exit $rc)" ||
	bad "no key cloud: rc=$rc $(cat "$tmp/o")"

[ "$fails" -eq 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" -eq 0 ]
