#!/usr/bin/env bash
# events.sh - GET /v1/jobs/{job}/events and the CLI that follows it, on a
# real all-in-one cnlabd (embedded agent, fake pool, real processes):
#   - the stream, read with curl as it comes: the job's document first,
#     each output chunk once and in order with its id, the end with the
#     exit code, and then the response ends (it does not wait for a
#     timeout: curl returns on its own);
#   - an output chunk is sent while the job still runs, before the job
#     ends (streamed, not gathered), and a keep-alive comment while the
#     job is silent;
#   - resuming with Last-Event-ID or ?after= gives the output after that
#     chunk only; a bad resume id is a 400 naming the header or field;
#   - another project's user cannot follow the job (404, as GET of it);
#   - cnlab run through a proxy that cuts the event stream mid-job: the
#     CLI resumes, stdout holds every line exactly once, in order, and it
#     exits with the job's code; cnlab jobs logs --follow likewise;
#   - cnlab run opens one event stream (no polling of the job).
set -u
cnlab=$(realpath "$1")
cnlabd=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
tmp=$(mktemp -d)
pid=
ppid_=
cleanup() {
	[ -n "$ppid_" ] && kill "$ppid_" 2>/dev/null
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	[ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG \
	CNLAB_FOLLOW
export HOME=$tmp/home
mkdir -p "$HOME"

allinone_start "$cnlabd" "$tmp"
login_api() {
	curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" \
		"$url/v1/auth/login" | jq -r .token
}
api() {
	curl -sS -X "$2" -H "Authorization: Bearer $1" ${4:+-d "$4"} "$url$3"
}
root=$(login_api admin "$(cat "$tmp/data/admin.password")")
proj=$(api "$root" GET /v1/projects | jq -r '.items[] | select(.name=="default") | .id')
api "$root" POST /v1/users '{"name":"eve","password":"pw-eve-long-enough"}' >/dev/null
other=$(api "$root" POST /v1/projects '{"name":"other"}' | jq -r .id)
api "$root" POST "/v1/projects/$other/members" '{"user":"eve","role":"member"}' >/dev/null
eve=$(login_api eve pw-eve-long-enough)
# The node must be up before jobs are timed.
for _ in $(seq 200); do
	[ "$(api "$root" GET /v1/nodes | jq '.items | length')" -ge 1 ] 2>/dev/null && break
	sleep 0.1
done

submit() { # submit COMMAND: the job's id
	api "$root" POST "/v1/projects/$proj/jobs" \
		"$(jq -cn --arg c "$1" '{command: $c, gpu: "h100-10"}')" | jq -r .id
}
events() { # events TOKEN JOB [curl args...]: the stream, as it comes
	local t=$1 j=$2
	shift 2
	curl -sSN --max-time 60 -H "Authorization: Bearer $t" "$@" "$url/v1/jobs/$j/events"
}

# --- The stream, read as it comes ------------------------------------------
# The job waits for a file this test makes in its working folder (the
# node's jobs/ID, its /workspace) once it has seen the first chunk on the
# stream: the chunk can only have come while the job ran.
job=$(submit "echo first; while [ ! -e go ]; do sleep 0.05; done; echo second; echo to-err >&2; exit 7")
events "$root" "$job" >"$tmp/s1" 2>"$tmp/s1.err" &
cpid=$!
for _ in $(seq 400); do
	grep -q '"data":"first\\n"' "$tmp/s1" && break
	sleep 0.05
done
st=$(api "$root" GET "/v1/jobs/$job" | jq -r .state)
grep -q '"data":"first\\n"' "$tmp/s1" && [ "$st" = running ] && ! grep -q '^event: end' "$tmp/s1" &&
	ok "a chunk is streamed while the job runs" || bad "streamed: state=$st $(cat "$tmp/s1")"
# Nothing more comes while the job waits: a keep-alive comment does
# (after 15 s of silence), so that no client nor proxy takes the stream
# for dead.
for _ in $(seq 400); do
	grep -q '^: keep-alive$' "$tmp/s1" && break
	sleep 0.1
done
grep -q '^: keep-alive$' "$tmp/s1" && ok "a keep-alive comes while nothing else does" ||
	bad "no keep-alive: $(cat "$tmp/s1")"
touch "$tmp/data/agent/jobs/$job/go"
wait $cpid
rc=$?
[ $rc = 0 ] && ok "the response ends on its own at the job's end" || bad "curl rc=$rc $(cat "$tmp/s1.err")"
head -1 "$tmp/s1" | grep -qx 'event: job' && ok "the job's document comes first" ||
	bad "first: $(head -3 "$tmp/s1")"
[ "$(grep -c '^event: log$' "$tmp/s1")" = 3 ] && [ "$(grep -c '^event: end$' "$tmp/s1")" = 1 ] &&
	ok "three chunks and one end" || bad "counts: $(cat "$tmp/s1")"
got=$(sed -n 's/^data: \(.*"stream".*\)$/\1/p' "$tmp/s1" | jq -r .data | tr -d '\n')
[ "$got" = firstsecondto-err ] && ok "output in order, each once" || bad "order: $got"
endline=$(grep -A1 '^event: end$' "$tmp/s1" | sed -n 's/^data: //p')
[ "$(jq -r .state <<<"$endline")" = failed ] && [ "$(jq -r .exit_code <<<"$endline")" = 7 ] &&
	ok "the end carries the exit code" || bad "end: $endline"
tail -1 "$tmp/s1" | grep -q '^$' && ok "events end with a blank line" || bad "framing"
# Each log event has an id: the chunk's, as GET .../logs lists it.
ids=$(grep '^id: ' "$tmp/s1" | cut -c5- | tr '\n' ' ')
want=$(api "$root" GET "/v1/jobs/$job/logs" | jq -r '.items[].id' | tr '\n' ' ')
[ -n "$want" ] && [ "$ids" = "$want" ] && ok "event ids are the chunks' ids" || bad "ids: '$ids' vs '$want'"
first=$(echo "$ids" | cut -d' ' -f1)
ct=$(curl -sS -o /dev/null -w '%{content_type}' -H "Authorization: Bearer $root" "$url/v1/jobs/$job/events")
[ "$ct" = text/event-stream ] && ok "content type text/event-stream" || bad "content type: $ct"

# --- Resuming ------------------------------------------------------------------
events "$root" "$job" -H "Last-Event-ID: $first" >"$tmp/s2"
got=$(sed -n 's/^data: \(.*"stream".*\)$/\1/p' "$tmp/s2" | jq -r .data | tr -d '\n')
head -1 "$tmp/s2" | grep -qx 'event: job' && [ "$got" = secondto-err ] &&
	ok "Last-Event-ID resumes after that chunk" || bad "resume header: $got"
events "$root" "$job" -G --data-urlencode "after=$first" >"$tmp/s3"
got=$(sed -n 's/^data: \(.*"stream".*\)$/\1/p' "$tmp/s3" | jq -r .data | tr -d '\n')
[ "$got" = secondto-err ] && ok "?after= resumes after that chunk" || bad "resume query: $got"
out=$(curl -sS -w ' %{http_code}' -H "Authorization: Bearer $root" -H "Last-Event-ID: a b" "$url/v1/jobs/$job/events")
[[ "$out" == *' 400' ]] && grep -q 'header \\"Last-Event-ID\\"' <<<"$out" &&
	ok "a bad Last-Event-ID is a 400 naming it" || bad "bad id: $out"
long=$(head -c 300 /dev/zero | tr '\0' x)
out=$(curl -sS -w ' %{http_code}' -H "Authorization: Bearer $root" "$url/v1/jobs/$job/events?after=$long")
[[ "$out" == *' 400' ]] && grep -q 'field \\"after\\"' <<<"$out" && ok "a bad ?after= is a 400 naming it" || bad "bad after: $out"

# --- Who may follow ------------------------------------------------------------
code=$(curl -sS -o "$tmp/eve" -w '%{http_code}' --max-time 10 -H "Authorization: Bearer $eve" "$url/v1/jobs/$job/events")
[ "$code" = 404 ] && ! grep -q 'event:' "$tmp/eve" && ok "another project's user gets 404" ||
	bad "eve: $code $(cat "$tmp/eve")"
code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "$url/v1/jobs/$job/events")
[ "$code" = 401 ] && ok "no token: 401" || bad "anonymous: $code"

# --- The CLI through a proxy that cuts the stream mid-job --------------------------
export CNLAB_TOKEN=$root
uport=${url##*:}
python3 "$here/cut_proxy.py" "$tmp/pport" "$uport" "$tmp/proxy.log" 1 &
ppid_=$!
for _ in $(seq 100); do
	[ -s "$tmp/pport" ] && break
	sleep 0.05
done
purl=http://127.0.0.1:$(cat "$tmp/pport")
"$cnlab" --server "$purl" run --project default --gpu h100-10 -- sh -c \
	'for i in $(seq 1 30); do echo line-$i; sleep 0.02; done; exit 5' >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
grep -qx cut "$tmp/proxy.log" && ok "the proxy cut the stream" || bad "no cut: $(cat "$tmp/proxy.log")"
[ $rc = 5 ] && ok "cnlab run exits with the job's code after a cut" || bad "run rc=$rc $(cat "$tmp/run.err")"
diff <(seq 1 30 | sed 's/^/line-/') "$tmp/run.out" >"$tmp/run.diff" &&
	ok "cnlab run: every line once, in order, across the cut" || bad "run output: $(cat "$tmp/run.diff")"
grep -Eq '^GET /v1/jobs/job_[0-9A-Z]+/events\?after=log_' "$tmp/proxy.log" &&
	ok "the CLI resumed with ?after=" || bad "resume: $(cat "$tmp/proxy.log")"
# Following, not polling: no GET of the job itself nor of its logs.
[ "$(grep -Ec '^GET /v1/jobs/job_[0-9A-Z]+(/logs)?(\?|$)' "$tmp/proxy.log")" = 0 ] &&
	[ "$(grep -c '/events' "$tmp/proxy.log")" = 2 ] &&
	ok "cnlab run reads events (two streams: one cut), no polls" ||
	bad "cnlab run polled: $(cat "$tmp/proxy.log")"

: >"$tmp/proxy.log"
kill "$ppid_"
wait "$ppid_" 2>/dev/null
rm -f "$tmp/pport"
python3 "$here/cut_proxy.py" "$tmp/pport" "$uport" "$tmp/proxy.log" 1 &
ppid_=$!
for _ in $(seq 100); do
	[ -s "$tmp/pport" ] && break
	sleep 0.05
done
purl=http://127.0.0.1:$(cat "$tmp/pport")
job=$(submit 'for i in $(seq 1 20); do echo row-$i; sleep 0.02; done')
"$cnlab" --server "$purl" jobs logs --follow "$job" >"$tmp/f.out" 2>"$tmp/f.err"
rc=$?
[ $rc = 0 ] && grep -qx cut "$tmp/proxy.log" &&
	diff <(seq 1 20 | sed 's/^/row-/') "$tmp/f.out" >/dev/null &&
	ok "jobs logs --follow: every line once across a cut" ||
	bad "logs -f: rc=$rc $(cat "$tmp/f.err") $(cat "$tmp/f.out" | tr '\n' ' ')"

# The old poll path, kept for comparison, still works.
out=$(CNLAB_FOLLOW=poll "$cnlab" --server "$url" run --project default --gpu h100-10 -- sh -c 'echo polled; exit 3' 2>/dev/null)
rc=$?
[ $rc = 3 ] && [ "$out" = polled ] && ok "CNLAB_FOLLOW=poll still follows" || bad "poll: rc=$rc $out"

echo "$fails failed"
[ "$fails" = 0 ]
