#!/usr/bin/env bash
# retention.sh - a finished job's files (artifacts, checkpoint, inputs) stay
# artifacts_keep after its end, then go, from the store and the disk, and a
# download says why; a job still within its time keeps them; 0 (the
# default) keeps them until the project goes.  A real all-in-one, whose
# artifacts_keep is set in its environment (CNLAB_ARTIFACTS_KEEP).
set -u
cnlabd=$(realpath "$1")
cli=$(realpath "$2")
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
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD CNLAB_SERVER CNLAB_TOKEN
export HOME=$tmp/home CNLAB_CONFIG=$tmp/cli.json
mkdir -p "$HOME"

CNLAB_ARTIFACTS_KEEP=6s "$cnlabd" --all-in-one --data-dir "$tmp/data" \
	--listen 127.0.0.1:0 --gpus fake:1xH100-80GB-SXM >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 100); do
	grep -q 'CNLab is running' "$tmp/out" && break
	sleep 0.1
done
url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
[ -n "$url" ] || {
	echo "FAIL start: $(cat "$tmp/err")"
	exit 1
}
"$cli" login --server "$url" --user admin --password-stdin <"$tmp/data/admin.password" >/dev/null ||
	{ echo "FAIL login"; exit 1; }
tok=$(jq -r .token "$CNLAB_CONFIG")
get() { curl -sS -H "Authorization: Bearer $tok" "$url$1"; }

job_with_artifact() { # a finished job with result.txt; prints its id
	mkdir -p "$tmp/w" && cd "$tmp/w" || return
	printf 'echo kept > "$CNLAB_ARTIFACTS_DIR/result.txt"\n' >job.sh
	"$cli" run job.sh --gpu h100-25 >"$tmp/run.out" 2>&1 || bad "run: $(cat "$tmp/run.out")"
	sed -n 's/^✓ Job \(job_[A-Z0-9]*\) succeeded$/\1/p' "$tmp/run.out"
}
first=$(job_with_artifact)
[ -n "$first" ] && [ "$(get "/v1/jobs/$first/artifact?path=result.txt")" = kept ] &&
	ok "a finished job's artifact downloads" || bad "artifact: $first $(get "/v1/jobs/$first/artifact?path=result.txt")"
proj=$(get "/v1/jobs/$first" | jq -r .project_id)
[ -d "$tmp/data/files/$proj/$first" ] && ok "its files are on cnlabd's disk" || bad "no folder"

# Past artifacts_keep (6 s) the sweep deletes them.
for _ in $(seq 300); do
	[ -d "$tmp/data/files/$proj/$first" ] || break
	sleep 0.1
done
second=$(job_with_artifact)
out=$(get "/v1/jobs/$first/artifact?path=result.txt")
[ ! -d "$tmp/data/files/$proj/$first" ] && [ "$(jq -r .error.code <<<"$out")" = expired ] &&
	grep -q 'keeps a job.s files 6 s after its end (artifacts_keep)' <<<"$out" &&
	[ "$(get "/v1/jobs/$first/artifacts" | jq '.items | length')" = 0 ] &&
	ok "after artifacts_keep its files are gone, and a download says why" || bad "expired: $out"
[ "$(get "/v1/jobs/$second/artifact?path=result.txt")" = kept ] && [ -d "$tmp/data/files/$proj/$second" ] &&
	ok "a job within its time keeps them" || bad "second: $(get "/v1/jobs/$second/artifact?path=result.txt")"
[ "$(get "/v1/jobs/$first" | jq -r .state)" = succeeded ] && ok "the job itself stays" || bad "job gone"

echo "$fails failed"
[ "$fails" = 0 ]
