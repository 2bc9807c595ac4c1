#!/usr/bin/env bash
# admin.sh - the administration commands of cnlab, the way users and
# attackers use them, against the all-in-one platform (cnlabd --all-in-one,
# its embedded agent on a fake pool of two H100s, real processes in real
# cgroups). Every set-up step and action goes through the cnlab CLI; curl
# and jq only observe or attack (a revoked token sent by hand, a short
# password posted to the server itself, another project's id).
#
#  1. every admin command works for the admin, as a table and as -o json;
#     --all-in-one made the project "default" with the admin in it; login
#     tells a user in no project what to do;
#  2. a plain member is refused every admin-only command (exit 5, with a
#     message) and nothing changed;
#  3. invitations: redeem with a password from stdin logs in and picks the
#     only project; one use; too short a password is refused by the CLI
#     (exit 2) and by the server (400); a re-invite keeps the old password
#     until it is redeemed and ends every other invitation; a garbage
#     invitation and a login before redeeming are refused (exit 3); of two
#     redeems at once exactly one wins;
#  4. removing a member takes effect at once, without a new login; a
#     project-admin manages their own project only, never another one or
#     the system project;
#  5. API tokens work as CNLAB_TOKEN until revoked, and only their owner
#     can revoke them;
#  6. project delete is refused while a job runs or a server exists, and
#     for the system project; once empty it goes, and the name is free;
#  7. drain and cordon keep new work pending while running work stays
#     (node show lists it); undrain starts it; unknown nodes are 404;
#  8. profile create names the bad field of a bad shape; a new profile is
#     listed and runs work;
#  9. cnlab alone shows the server; unknown commands exit 2 with a
#     suggestion; a group alone prints its help;
# 10. a join token starts a real cnlab-agent that registers a second node;
#     only an administrator can revoke it;
# and the audit holds no secret; a restart keeps everything and does not
# bring back a deleted "default" project.
# Waits poll a bounded number of times; no check depends on how fast the
# machine is.
set -u
cnlabd=$(realpath "$1")
cnlab=$(realpath "$2")
agent=$(realpath "$3")
tmp=$(mktemp -d)
node2=adm$$-n2 # the joined agent's name, and so its cgroup root
pid=
agent_pid=
cleanup() {
	[ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	for d in /sys/fs/cgroup/*/cnlab/$node2 /sys/fs/cgroup/cnlab/$node2; do
		[ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	# Servers' workspace volumes stay mounted for the agent's next start;
	# this test's go with it (deepest first).
	awk -v t="$tmp/" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo |
		sort -r | xargs -r -n1 umount -l
	[ -n "${KEEP_TMP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
# check NAME COMMAND...: ok when the command succeeds.
check() {
	local name=$1
	shift
	if "$@"; then ok "$name"; else bad "$name"; fi
}
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
unset CNLAB_AGENT_TOKEN DISPLAY WAYLAND_DISPLAY
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/home/.config
mkdir -p "$HOME"

# start_cnlabd: the all-in-one platform on $tmp/data; sets pid and url.
start_cnlabd() {
	"$cnlabd" --all-in-one --data-dir "$tmp/data" --listen 127.0.0.1:0 \
		--gpus fake:2xH100-80GB-SXM --log-level warn >"$tmp/out" 2>>"$tmp/err" &
	pid=$!
	for _ in $(seq 100); do
		grep -q 'CNLab is running' "$tmp/out" && break
		sleep 0.1
	done
	url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
	[ -n "$url" ] || {
		echo "FAIL cnlabd did not start: $(cat "$tmp/err")"
		exit 1
	}
}
start_cnlabd

# c WHO ARGS...: cnlab as WHO (their own config file), stdin empty; sets
# rc, out (stdout) and err (stderr).  cin INPUT WHO ARGS...: INPUT on stdin.
cin() {
	local input=$1 who=$2
	shift 2
	printf '%s\n' "$input" | CNLAB_CONFIG=$tmp/$who.json "$cnlab" --server "$url" "$@" \
		>"$tmp/c.out" 2>"$tmp/c.err"
	rc=$?
	out=$(cat "$tmp/c.out")
	err=$(cat "$tmp/c.err")
}
c() {
	local who=$1
	shift
	CNLAB_CONFIG=$tmp/$who.json "$cnlab" --server "$url" "$@" \
		</dev/null >"$tmp/c.out" 2>"$tmp/c.err"
	rc=$?
	out=$(cat "$tmp/c.out")
	err=$(cat "$tmp/c.err")
}
# expect NAME CODE [PATTERN]: the last c/cin exited CODE (and its stderr
# matches PATTERN, an extended regex).
expect() {
	if [ "$rc" = "$2" ] && { [ -z "${3:-}" ] || grep -Eq -- "$3" <<<"$err"; }; then
		ok "$1"
	else
		bad "$1: exit $rc (want $2${3:+, /$3/}): $err $out"
	fi
}
# j WHO ARGS...: cnlab ... -o json as WHO, the JSON on stdout ("null" when
# it failed).
j() {
	local who=$1
	shift
	CNLAB_CONFIG=$tmp/$who.json "$cnlab" --server "$url" -o json "$@" </dev/null 2>/dev/null ||
		echo null
}
# jcheck NAME JSON FILTER: ok when jq -e FILTER holds on JSON.
jcheck() {
	if jq -e "$3" <<<"$2" >/dev/null 2>&1; then ok "$1"; else bad "$1: $3 on $2"; fi
}
# Observing and attacking by hand.
token_of() { jq -r .token "$tmp/$1.json"; }
http() { # http TOKEN METHOD PATH [BODY]: prints the status code
	curl -sS -o "$tmp/http.out" -w '%{http_code}' -X "$2" \
		${1:+-H "Authorization: Bearer $1"} ${4:+-d "$4"} "$url$3"
}
invite_of() { sed -n 's/.*--invite \(cnl_[A-Za-z0-9_-]*\).*/\1/p' <<<"$1" | head -1; }
cycles() { curl -sS "$url/metrics" | awk '/^cnlab_scheduling_cycle_seconds_count/ {print $2}'; }

# --- 1. The administrator ----------------------------------------------------
cin "$(cat "$tmp/data/admin.password")" admin login --user admin --password-stdin
expect "admin logs in" 0 "Logged in .* as admin \(project default\)"
jcheck "--all-in-one made project default, the admin its project-admin" "$(j admin whoami)" \
	'.admin == true and any(.memberships[]; .project == "default" and .role == "project-admin")'
sys=$(j admin project list | jq -r '.items[] | select(.name == "system") | .id')
default=$(j admin project list | jq -r '.items[] | select(.name == "default") | .id')

# user create (an invitation, table) and user create --password-stdin (json).
c admin user create alice
alice_inv=$(invite_of "$out")
[ "$rc" = 0 ] && grep -q "Created user alice" <<<"$out" &&
	grep -Fq "cnlab login --server $url --user alice --invite $alice_inv" <<<"$out" &&
	[ -n "$alice_inv" ] && ok "user create prints the invitation's login line" ||
	bad "user create: $rc $out $err"
u=$(printf 'bob-password-1\n' | CNLAB_CONFIG=$tmp/admin.json "$cnlab" --server "$url" \
	user create bob --password-stdin -o json)
jcheck "user create --password-stdin -o json: no invitation" "$u" \
	'.name == "bob" and (.id | startswith("usr_")) and (has("invite") | not)'
c admin user create alice
expect "user create of an existing name is refused" 5
c admin user list
[ "$rc" = 0 ] && grep -Eq '^NAME +ID +CREATED' <<<"$out" && grep -Eq '^alice +usr_' <<<"$out" &&
	grep -Eq '^bob +usr_' <<<"$out" && ok "user list (table)" || bad "user list: $out $err"
users_before=$(j admin user list | jq -c '[.items[].name] | sort')
check "user list -o json" [ "$users_before" = '["admin","alice","bob"]' ]
c admin user show alice
[ "$rc" = 0 ] && grep -q '^Password: *not set' <<<"$out" && grep -q '^Invite: *pending' <<<"$out" &&
	grep -q '^Projects: *none' <<<"$out" && ok "user show (table): invited, no project" ||
	bad "user show: $out $err"
jcheck "user show -o json" "$(j admin user show bob)" \
	'.name == "bob" and .password_set == true and .invite_pending == false and .memberships == []'
c admin user show nobody
expect "user show of an unknown user: not found" 4 'not found'

# A user in no project is told so at login.
cin bob-password-1 bob login --user bob --password-stdin
expect "login of a user in no project prints the hint" 0 'You are in no project yet'
grep -q 'cnlab project member add PROJECT bob' <<<"$err" && ok "the hint names the command" ||
	bad "login hint: $err"

# project create / show / member add / list / set-role (tables and json).
p=$(j admin project create teama --on-prem-only)
jcheck "project create --on-prem-only -o json" "$p" \
	'.name == "teama" and .on_prem_only == true and (.id | startswith("prj_"))'
teama=$(jq -r .id <<<"$p")
c admin project create teamb
[ "$rc" = 0 ] && grep -q "Created project teamb" <<<"$out" && ok "project create (table)" ||
	bad "project create: $out $err"
teamb=$(j admin project show teamb | jq -r .id)
c admin project create teamb
expect "project create of an existing name is refused" 5
for u in carol dave erin; do
	printf '%s-password-1\n' $u | CNLAB_CONFIG=$tmp/admin.json "$cnlab" --server "$url" \
		user create $u --password-stdin >/dev/null 2>&1
done
c admin project member add teama carol --role project-admin
[ "$rc" = 0 ] && grep -q "Added carol project-admin in project teama" <<<"$out" &&
	ok "project member add --role (table)" || bad "member add: $out $err"
jcheck "project member add -o json (default role member)" \
	"$(j admin project member add teamb erin)" '.user == "erin" and .role == "member" and .project_id == "'"$teamb"'"'
c admin project member add teama nobody
expect "member add of an unknown user: not found" 4
c admin project member add teama dave --role boss
expect "member add with a bad role: usage" 2 'viewer, member or project-admin'
c admin project member list teama
[ "$rc" = 0 ] && grep -Eq '^carol +project-admin +usr_' <<<"$out" && ok "project member list (table)" ||
	bad "member list: $out $err"
jcheck "project member list -o json" "$(j admin project member list teamb)" \
	'[.items[] | {user, role}] == [{"user": "erin", "role": "member"}]'
jcheck "project member set-role -o json" "$(j admin project member set-role teamb erin viewer)" \
	'.user == "erin" and .role == "viewer"'
c admin project member set-role teamb erin member
[ "$rc" = 0 ] && grep -q "Made erin member in project teamb" <<<"$out" &&
	ok "project member set-role (table)" || bad "set-role: $out $err"
c admin project show teama
[ "$rc" = 0 ] && grep -q '^Project: *teama' <<<"$out" && grep -q '^On-prem only: *yes' <<<"$out" &&
	grep -Eq '^carol +project-admin' <<<"$out" && ok "project show (table)" || bad "project show: $out $err"
jcheck "project show -o json lists the members" "$(j admin project show teama)" \
	'.name == "teama" and .on_prem_only == true and [.members[].user] == ["carol"]'
c admin project member remove system admin
expect "an admin cannot remove themselves from system" 5 'cannot remove themselves'
c admin project member set-role system admin member
expect "... nor demote themselves there (the only admin)" 5 'cannot change their own role'
jcheck "... and is still an admin" "$(j admin whoami)" '.admin == true'

# user invite (table and json): a new invitation for an existing user.
c admin user invite bob
bob_inv1=$(invite_of "$out")
[ "$rc" = 0 ] && [ -n "$bob_inv1" ] && grep -q "One-time invitation for bob" <<<"$out" &&
	ok "user invite (table)" || bad "user invite: $out $err"
inv=$(j admin user invite bob)
jcheck "user invite -o json" "$inv" '.name == "bob" and (.invite.token | startswith("cnl_")) and .invite.expires_at != null'
bob_inv2=$(jq -r .invite.token <<<"$inv")
c admin user invite nobody
expect "user invite of an unknown user: not found" 4

# node list / show / cordon / drain / undrain (json for the state changes).
node=$(j admin node list | jq -r '.items[0].name')
c admin node list
[ "$rc" = 0 ] && grep -Eq "^$node +H100-80GB-SXM +2 +up +[0-9]+ / 200" <<<"$out" &&
	ok "node list (table): the embedded agent's node" || bad "node list: $out $err"
c admin node show "$node"
[ "$rc" = 0 ] && grep -q "^Node: *$node (node_" <<<"$out" && grep -q '^GPUs: *2 x H100-80GB-SXM' <<<"$out" &&
	ok "node show (table)" || bad "node show: $out $err"
jcheck "node show -o json" "$(j admin node show "$node")" \
	'.name == "'"$node"'" and .state == "up" and .blocks_total == 200 and (.running | type) == "array"'
jcheck "node cordon -o json" "$(j admin node cordon "$node")" '.state == "cordoned"'
jcheck "... node list shows it cordoned" "$(j admin node list)" '.items[0].state == "cordoned"'
jcheck "node drain -o json" "$(j admin node drain "$node")" '.state == "draining"'
jcheck "node undrain -o json" "$(j admin node undrain "$node")" '.state == "up"'
c admin node cordon "$node"
[ "$rc" = 0 ] && grep -q "Node $node: cordoned" <<<"$out" && ok "node cordon (table)" || bad "cordon: $out $err"
c admin node undrain "$node"
[ "$rc" = 0 ] && grep -q "Node $node: back in service" <<<"$out" && ok "node undrain (table)" ||
	bad "undrain: $out $err"

# --- 3. Invitations ------------------------------------------------------------
c admin project member add default alice
cin "any-password-1" alice login --user alice --password-stdin
expect "login as an invited user before redeeming: refused" 3 'refused these credentials'
check "... with an empty password too (by hand: 401)" \
	[ "$(http "" POST /v1/auth/login '{"user":"alice","password":""}')" = 401 ]
cin short alice login --invite "$alice_inv"
expect "redeem with a password under 8 bytes: usage" 2 'at least 8'
# The CLI itself refuses it: it does not even try an unreachable server.
printf 'short\n' | CNLAB_CONFIG=$tmp/alice.json "$cnlab" --server http://127.0.0.1:9 \
	login --invite "$alice_inv" >/dev/null 2>&1
rc=$?
check "... refused by the CLI before it asks the server" [ "$rc" = 2 ]
check "the server refuses a short password itself (400)" \
	[ "$(http "" POST /v1/auth/redeem '{"invite":"'"$alice_inv"'","password":"short"}')" = 400 ]
grep -q 'at least 8' "$tmp/http.out" && ok "... and says why" || bad "redeem 400: $(cat "$tmp/http.out")"
cin "alice-password-1" alice login --invite cnl_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA
expect "a garbage invitation: refused" 3 'invalid, used or expired invitation'
cin "alice-password-1" alice login --invite not-even-a-token
expect "a malformed invitation: refused" 3
jcheck "refusals changed nothing: alice still invited, no password" "$(j admin user show alice)" \
	'.password_set == false and .invite_pending == true'
check "an invitation is no bearer token (401)" [ "$(http "$alice_inv" GET /v1/auth/whoami)" = 401 ]
cin "alice-password-1" alice login --invite "$alice_inv"
expect "redeem with a password from stdin logs in" 0 'Logged in .* as alice \(project default\)'
jcheck "... the config holds the session and the only project" "$(cat "$tmp/alice.json")" \
	'.project == "default" and (.token | length) > 20 and .server == "'"$url"'"'
jcheck "... and it works" "$(j alice whoami)" '.name == "alice" and .admin == false'
jcheck "user show: password set, no invitation pending" "$(j admin user show alice)" \
	'.password_set == true and .invite_pending == false and [.memberships[].project] == ["default"]'
cin "alice-password-2" alice2 login --invite "$alice_inv"
expect "the same invitation again: refused" 3 'invalid, used or expired'
check "... and no session was stored" [ ! -s "$tmp/alice2.json" ]
cin "alice-password-2" alice2 login --user alice --password-stdin
expect "... the second password was not set" 3
cin "alice-password-1" alice2 login --user alice --password-stdin
expect "... the first one still works" 0
# A reset: the old password works until the invitation is redeemed; after,
# only the new one; every other invitation of the user ends with it.
cin "bob-password-1" bob login --user bob --password-stdin
expect "user invite: the old password still works before redeeming" 0
cin "bob-password-2" bob login --invite "$bob_inv2"
expect "redeem the newest invitation" 0 'as bob'
cin "bob-password-1" bob2 login --user bob --password-stdin
expect "after redeeming, the old password is refused" 3
cin "bob-password-2" bob2 login --user bob --password-stdin
expect "after redeeming, the new password works" 0
cin "bob-password-3" bob2 login --invite "$bob_inv1"
expect "redeeming one invitation ended the user's other one" 3
cin "bob-password-2" bob2 login --user bob --password-stdin
expect "... and the password stayed" 0

# Two redeems of one invitation at once (the server hashes outside its lock):
# exactly one wins, and its password is the one set.
erin_inv=$(j admin user invite erin | jq -r .invite.token)
racers=()
for k in 1 2; do
	curl -sS -o /dev/null -w '%{http_code}\n' -X POST \
		-d '{"invite":"'"$erin_inv"'","password":"erin-racer-'$k'"}' \
		"$url/v1/auth/redeem" >"$tmp/race.$k" &
	racers+=($!)
done
wait "${racers[@]}"
codes=$(sort "$tmp/race.1" "$tmp/race.2" | tr '\n' ' ')
check "two redeems of one invitation at once: one wins ($codes)" [ "$codes" = "200 401 " ]
winner=$(grep -l 200 "$tmp/race.1" "$tmp/race.2" | sed 's/.*race\.//')
cin "erin-racer-$winner" erin login --user erin --password-stdin
expect "... the winner's password is set" 0
cin "erin-racer-$((3 - winner))" erin login --user erin --password-stdin
expect "... the loser's is not" 3

# --- 2. A plain member is refused every admin-only command -------------------
audit_n() { j admin audit --limit 1000 | jq '.items | length'; }
profiles_before=$(j admin profiles list | jq -c '[.items[].name]')
a0=$(audit_n)
refused() { # refused NAME ARGS...: alice gets exit 5 and a message
	local name=$1
	shift
	cin mallory-password-1 alice "$@"
	expect "member refused: $name" 5 'not permitted: .+'
}
refused "user create" user create mallory
refused "user create --password-stdin" user create mallory --password-stdin
refused "user list" user list
refused "user show" user show admin
refused "user invite" user invite admin
refused "project create" project create mine
refused "project delete" project delete default --yes
refused "project member add" project member add default bob --role project-admin
refused "project member set-role" project member set-role default alice project-admin
refused "project member remove" project member remove default admin
refused "node list" node list
refused "node show" node show "$node"
refused "node cordon" node cordon "$node"
refused "node drain" node drain "$node"
refused "node undrain" node undrain "$node"
refused "node join-token" node join-token --node evil
refused "profile create" profile create evil --gpu h100-100
refused "profile delete" profile delete h100-25pct
refused "audit" audit
check "nothing changed: the users" [ "$(j admin user list | jq -c '[.items[].name] | sort')" = \
	'["admin","alice","bob","carol","dave","erin"]' ]
jcheck "nothing changed: project default and its members" "$(j admin project show default)" \
	'[.members[] | {user, role}] | sort_by(.user) == [{"user": "admin", "role": "project-admin"}, {"user": "alice", "role": "member"}]'
check "nothing changed: no project 'mine'" [ "$(j admin project list | jq '[.items[] | select(.name == "mine")] | length')" = 0 ]
check "nothing changed: the profiles" [ "$(j admin profiles list | jq -c '[.items[].name]')" = "$profiles_before" ]
jcheck "nothing changed: the node is up" "$(j admin node show "$node")" '.state == "up"'
jcheck "nothing changed: admin has no invitation pending" "$(j admin user show admin)" \
	'.invite_pending == false and .password_set == true'
# Every refusal is audited as such, and none as done.
jcheck "the audit shows each refusal as 403 and no success by alice" \
	"$(j admin audit --limit 1000 | jq --argjson n "$a0" '.items[$n:]')" \
	'map(select(.actor == "'"$(j admin user show alice | jq -r .id)"'")) as $a |
	 ($a | length) >= 12 and all($a[]; .result | startswith("403")) and
	 any($a[]; .action == "node.join_token")'

# --- 4. Memberships take effect at once; project-admins stay in their lane ----
cin dave-password-1 dave login --user dave --password-stdin
cin carol-password-1 carol login --user carol --password-stdin
c carol project member add teama dave
expect "a project-admin adds a member to their project" 0
c carol project member set-role teama dave viewer
expect "... changes their role" 0
c carol project member set-role teama dave member
c dave jobs list --project teama
expect "the member lists the project's jobs" 0
dave_tok=$(token_of dave)
check "... (by hand too: 200)" [ "$(http "$dave_tok" GET "/v1/projects/$teama/jobs")" = 200 ]
c carol project member remove teama dave
[ "$rc" = 0 ] && grep -q "Removed dave from project teama" <<<"$out" &&
	ok "the project-admin removes the member" || bad "member remove: $out $err"
c dave jobs list --project teama
expect "the removed member's next jobs list is refused, same session" 4 'not found'
check "... and the server refuses the same session (404)" \
	[ "$(http "$dave_tok" GET "/v1/projects/$teama/jobs")" = 404 ]
check "... even to submit (404)" \
	[ "$(http "$dave_tok" POST "/v1/projects/$teama/jobs" '{"command":"true","gpu":"cpu"}')" = 404 ]
c carol project member remove teama dave
expect "removing a non-member: not found" 4
# Another project: not visible to carol, as if it did not exist.
c carol project member add teamb carol --role project-admin
expect "a project-admin cannot add members to another project (not found)" 4 'not found'
c carol project member remove teamb erin
expect "a project-admin cannot remove members of another project (not found)" 4 'not found'
c carol project member list teamb
expect "... nor list them" 4
check "by hand, adding to another project: 404" \
	[ "$(http "$(token_of carol)" POST "/v1/projects/$teamb/members" '{"user":"carol","role":"project-admin"}')" = 404 ]
check "by hand, removing from another project: 404" \
	[ "$(http "$(token_of carol)" DELETE "/v1/projects/$teamb/members/erin")" = 404 ]
c carol project member add system carol --role project-admin
expect "a project-admin cannot touch the system project" 4
check "by hand, granting themselves admin in system: 404" \
	[ "$(http "$(token_of carol)" POST "/v1/projects/$sys/members" '{"user":"carol","role":"admin"}')" = 404 ]
check "by hand, removing the admin from system: 404" \
	[ "$(http "$(token_of carol)" DELETE "/v1/projects/$sys/members/admin")" = 404 ]
check "by hand, \"admin\" in their own project: 400" \
	[ "$(http "$(token_of carol)" POST "/v1/projects/$teama/members" '{"user":"carol","role":"admin"}')" = 400 ]
jcheck "nothing changed: teamb's members" "$(j admin project member list teamb)" \
	'[.items[] | {user, role}] == [{"user": "erin", "role": "member"}]'
jcheck "nothing changed: carol is no admin and in teama only" "$(j admin user show carol)" \
	'[.memberships[] | {project, role}] == [{"project": "teama", "role": "project-admin"}]'
jcheck "nothing changed: the admin is still in system" "$(j admin whoami)" \
	'.admin == true and any(.memberships[]; .project == "system" and .role == "admin")'

# --- 5. API tokens ---------------------------------------------------------------
c alice token create ci --expires-in-days 1
ci=$out
[ "$rc" = 0 ] && [ "$(wc -l <"$tmp/c.out")" = 1 ] && [[ "$ci" == cnl_* ]] &&
	ok "token create prints the secret alone on stdout" || bad "token create: $out $err"
tok_whoami() { CNLAB_TOKEN=$1 CNLAB_CONFIG=$tmp/none.json "$cnlab" --server "$url" whoami 2>&1; }
out=$(tok_whoami "$ci")
grep -q '^User: *alice$' <<<"$out" && ok "the token works as CNLAB_TOKEN" || bad "CNLAB_TOKEN: $out"
c alice token list
[ "$rc" = 0 ] && grep -Eq '^ci +[0-9a-f]{12} ' <<<"$out" && ok "token list (table)" || bad "token list: $out $err"
ci_id=$(j alice token list | jq -r '.items[] | select(.name == "ci") | .id')
jcheck "token create -o json" "$(j alice token create other)" \
	'.name == "other" and (.token | startswith("cnl_")) and (.id | length) == 64 and .expires_at != null'
c bob token revoke "$ci_id"
expect "another user cannot revoke it: not found" 4 'not found'
check "... by hand either (404)" [ "$(http "$(token_of bob)" DELETE "/v1/auth/tokens/$ci_id")" = 404 ]
out=$(tok_whoami "$ci")
grep -q '^User: *alice$' <<<"$out" && ok "... and it still works" || bad "token after bob: $out"
jcheck "token revoke -o json" "$(j alice token revoke ci)" '.revoked == "'"$ci_id"'"'
CNLAB_TOKEN=$ci CNLAB_CONFIG=$tmp/none.json "$cnlab" --server "$url" whoami >/dev/null 2>&1
rc=$?
check "a revoked token: exit 3" [ "$rc" = 3 ]
check "a revoked token by hand: 401" [ "$(http "$ci" GET /v1/auth/whoami)" = 401 ]
jcheck "token list no longer shows it" "$(j alice token list)" '[.items[].name] == ["other"]'
c alice token revoke other
[ "$rc" = 0 ] && grep -q "Revoked token other" <<<"$out" && ok "token revoke (table)" || bad "revoke: $out $err"
c alice token revoke ci
expect "revoking it again: not found" 4

# --- 6 and 7. Project delete; drain and cordon -------------------------------
c admin project create scratch
job1=$(CNLAB_CONFIG=$tmp/admin.json "$cnlab" --server "$url" run --project scratch \
	--gpu h100-10 --detach -- sleep 600 2>/dev/null)
phase() { j admin jobs show "$1" | jq -r '.status.phase // .state'; }
state() { j admin jobs show "$1" | jq -r .state; }
for _ in $(seq 100); do [ "$(state "$job1")" = running ] && break; sleep 0.2; done
check "a long job runs in project scratch" [ "$(state "$job1")" = running ]
c admin project delete scratch
expect "project delete without --yes, stdin not a tty: usage" 2 'add --yes'
c admin project delete scratch --yes
expect "project delete while a job runs: refused" 5 'unfinished jobs'
c admin project show scratch
expect "... the project is still there" 0
check "... and the job runs on" [ "$(state "$job1")" = running ]

c admin node drain "$node"
expect "node drain of the only node" 0
c0=$(cycles)
job2=$(CNLAB_CONFIG=$tmp/admin.json "$cnlab" --server "$url" run --project scratch \
	--gpu h100-10 --detach -- sleep 1 2>/dev/null)
# Two scheduling cycles after the submission, it is still pending.
for _ in $(seq 100); do [ "$(cycles)" -ge $((c0 + 2)) ] && break; sleep 0.1; done
check "scheduling cycles ran meanwhile" [ "$(cycles)" -ge $((c0 + 2)) ]
jcheck "a new job stays pending on a drained node (-o json)" "$(j admin jobs show "$job2")" \
	'.state == "pending" and .status.phase == "pending"'
c admin jobs show "$job2"
grep -q '^State: *pending (pending)' <<<"$out" && ok "jobs show says pending" || bad "jobs show: $out"
c admin node show "$node"
grep -q "^State: *draining" <<<"$out" && grep -q "^Running: *job $job1 (h100-10, 10 blocks" <<<"$out" &&
	ok "node show lists what still runs there" || bad "node show draining: $out"
jcheck "node show -o json: the running job, not the pending one" "$(j admin node show "$node")" \
	'[.running[].id] == ["'"$job1"'"]'
c admin node undrain "$node"
for _ in $(seq 100); do [ "$(phase "$job2")" != pending ] && break; sleep 0.2; done
check "after undrain the pending job starts" [ "$(phase "$job2")" != pending ]
c admin node cordon "$node"
c0=$(cycles)
job3=$(CNLAB_CONFIG=$tmp/admin.json "$cnlab" --server "$url" run --project scratch \
	--gpu h100-10 --detach -- true 2>/dev/null)
for _ in $(seq 100); do [ "$(cycles)" -ge $((c0 + 2)) ] && break; sleep 0.1; done
check "a new job stays pending on a cordoned node" [ "$(phase "$job3")" = pending ]
check "... while the running one runs on" [ "$(state "$job1")" = running ]
c admin node undrain "$node"
for _ in $(seq 100); do [ "$(phase "$job3")" != pending ] && break; sleep 0.2; done
check "after undrain it starts" [ "$(phase "$job3")" != pending ]
c admin node show nosuchnode
expect "node show of an unknown node: not found" 4 'not found'
c admin node drain nosuchnode
expect "node drain of an unknown node: not found" 4

# A stopped server also holds the project.
c admin server create --project scratch --name nb --image host --profile h100-25pct --no-wait
expect "server create in scratch" 0
srv_state() { j admin server list --project scratch | jq -r '.items[] | select(.name == "nb") | .state'; }
for _ in $(seq 100); do [ "$(srv_state)" = running ] && break; sleep 0.2; done
c admin server stop nb --project scratch
for _ in $(seq 100); do [ "$(srv_state)" = stopped ] && break; sleep 0.2; done
check "the server is stopped" [ "$(srv_state)" = stopped ]
c admin jobs cancel "$job1"
for _ in $(seq 100); do [ "$(state "$job1")" = cancelled ] && break; sleep 0.2; done
for _ in $(seq 100); do
	case "$(state "$job2") $(state "$job3")" in *pending* | *running*) sleep 0.2 ;; *) break ;; esac
done
check "the jobs ended" [ "$(state "$job1") $(state "$job2") $(state "$job3")" = "cancelled succeeded succeeded" ]
c admin project delete scratch --yes
expect "project delete with a stopped server: refused" 5 'servers'
c admin server delete nb --project scratch
expect "server delete" 0
scratch=$(j admin project show scratch | jq -r .id)
jcheck "project delete -o json" "$(j admin project delete scratch --yes)" \
	'.name == "scratch" and .deleted == "'"$scratch"'"'
c admin project show scratch
expect "project show after delete: not found" 4 'not found'
c admin jobs show "$job1"
expect "its jobs are gone too" 4
p=$(j admin project create scratch)
jcheck "the name can be reused, by a new empty project" "$p" \
	'.name == "scratch" and .id != "'"$scratch"'"'
jcheck "... which has no jobs of the old one" "$(j admin jobs list --project scratch)" '.items == []'
c admin project delete scratch --yes
[ "$rc" = 0 ] && grep -q "Deleted project scratch" <<<"$out" && ok "project delete (table)" ||
	bad "project delete: $out $err"
c admin project delete system --yes
expect "project delete system: refused" 5 'cannot be deleted'
check "system is still there" [ "$(j admin project show system | jq -r .id)" = "$sys" ]

# --- 8. Profiles -------------------------------------------------------------------
c admin profile create bad --gpu h100-150
expect "profile create with a bad shape: usage, names the field" 2 'field "gpu"'
c admin profile create bad --gpu nosuchgpu-10
expect "profile create with an unknown GPU: usage, names the field" 2 'field "gpu"'
c admin profile create bad
expect "profile create without --gpu: usage" 2 'needs --gpu'
check "no profile 'bad' was made" \
	[ "$(j admin profiles list | jq '[.items[] | select(.name == "bad")] | length')" = 0 ]
jcheck "profile create -o json" "$(j admin profile create h100-5pct --gpu h100-5 --description 'a small slice')" \
	'.name == "h100-5pct" and .gpu == "h100-5" and .gpu_type == "H100-80GB-SXM" and .description == "a small slice"'
c alice profiles list
grep -Eq '^h100-5pct +H100 +5% +✓ now' <<<"$out" && ok "a user sees it in profiles list" || bad "profiles: $out"
c admin profile list
grep -Eq '^h100-5pct +H100' <<<"$out" && ok "profile list (table)" || bad "profile list: $out"
# Detached, then polled: a job that never starts must fail the check, not
# hang the test.
c alice run --profile h100-5pct --detach -- echo from-the-profile
job4=$out
for _ in $(seq 100); do [ "$(j alice jobs show "$job4" | jq -r .state)" = succeeded ] && break; sleep 0.2; done
jcheck "cnlab run --profile runs on the profile's shape" "$(j alice jobs show "$job4")" \
	'.profile == "h100-5pct" and .gpu == "h100-5" and .state == "succeeded"'
c alice jobs logs "$job4"
grep -q from-the-profile <<<"$out" && ok "... and its output came back" || bad "logs: $out $err"
c admin profile delete h100-5pct
[ "$rc" = 0 ] && grep -q "Deleted profile h100-5pct" <<<"$out" && ok "profile delete" || bad "profile delete: $out $err"
check "... it is gone" [ "$(j admin profiles list | jq '[.items[] | select(.name == "h100-5pct")] | length')" = 0 ]
c admin profile delete h100-5pct
expect "profile delete of an unknown profile: not found" 4

# --- 9. The command line itself ---------------------------------------------------
out=$(CNLAB_CONFIG=$tmp/admin.json "$cnlab" 2>&1)
rc=$?
[ "$rc" = 0 ] && grep -q "^Server: *$url  (logged in; project default)" <<<"$out" &&
	ok "cnlab alone prints the server it would use" || bad "cnlab alone: $rc $out"
out=$(CNLAB_CONFIG=$tmp/none.json "$cnlab" 2>&1)
grep -q '^Server: *http://127.0.0.1:8080 (default)  (not logged in)' <<<"$out" &&
	ok "... the default one when there is no config" || bad "cnlab alone, no config: $out"
for args in "bogus" "bogus --help"; do
	# shellcheck disable=SC2086
	out=$(CNLAB_CONFIG=$tmp/admin.json "$cnlab" $args 2>&1)
	rc=$?
	[ "$rc" = 2 ] && grep -q "unknown command 'bogus'" <<<"$out" && ok "cnlab $args: exit 2, unknown command" ||
		bad "cnlab $args: $rc $out"
done
out=$(CNLAB_CONFIG=$tmp/admin.json "$cnlab" sever list 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -q "did you mean 'cnlab server'" <<<"$out" && ok "cnlab sever list suggests cnlab server" ||
	bad "sever: $rc $out"
out=$(CNLAB_CONFIG=$tmp/admin.json "$cnlab" project member 2>&1)
rc=$?
n=$(grep -Ec '^  project member (add|list|set-role|remove) ' <<<"$out")
[ "$rc" = 2 ] && [ "$n" = 4 ] && ok "cnlab project member alone prints the group help (exit 2)" ||
	bad "project member: $rc $out"
out=$(CNLAB_CONFIG=$tmp/admin.json "$cnlab" project member --help 2>/dev/null)
rc=$?
[ "$rc" = 0 ] && [ "$(grep -Ec '^  project member (add|list|set-role|remove) ' <<<"$out")" = 4 ] &&
	ok "... and with --help on stdout, exit 0" || bad "project member --help: $rc $out"

# --- 10. A join token starts a real agent ----------------------------------------
c alice node join-token --node "$node2"
expect "a member cannot make a join token" 5
c admin node join-token
expect "a join token names its node (exit 2)" 2 'node'
c admin node join-token --node "$node2" --expires 2h
printf '%s\n' "$out" >"$tmp/join.out"
line=$(grep 'CNLAB_AGENT_TOKEN=' <<<"$out")
jt=$(sed -n 's/.*CNLAB_AGENT_TOKEN=\([^ ]*\) .*/\1/p' <<<"$line")
[ "$rc" = 0 ] && [[ "$jt" == cnlj_* ]] && grep -Fq "cnlab-agent --server $url --name $node2" <<<"$line" &&
	ok "join-token prints the cnlab-agent command line" || bad "join-token: $out $err"
CNLAB_TOKEN=$jt CNLAB_CONFIG=$tmp/none.json "$cnlab" --server "$url" user list >/dev/null 2>&1
rc=$?
check "a join token is no user's credential (exit 3)" [ "$rc" = 3 ]
jcheck "join-token -o json" "$(j admin node join-token --node other-$$)" \
	'(.token | startswith("cnlj_")) and .node == "other-'"$$"'" and .expires_at != null'
# Run the printed command, with a fake L40S pool and a work dir of its own.
srv=$(sed -n 's/.*--server \([^ ]*\).*/\1/p' <<<"$line")
name=$(sed -n 's/.*--name \([^ ]*\).*/\1/p' <<<"$line")
CNLAB_AGENT_TOKEN=$jt "$agent" --server "$srv" --name "$name" --gpus fake:1xL40S \
	--work-dir "$tmp/agent2" --cpu-milli 4000 --mem-mib 8192 --log-level info \
	>"$tmp/agent2.out" 2>"$tmp/agent2.err" &
agent_pid=$!
for _ in $(seq 100); do
	j admin node list | jq -e '.items[] | select(.name == "'"$node2"'")' >/dev/null && break
	sleep 0.2
done
c admin node list
grep -Eq "^$node2 +L40S +1 +up " <<<"$out" && grep -Eq "^$node +H100" <<<"$out" &&
	ok "the joined agent's node appears in node list" || bad "node list: $out $(tail -5 "$tmp/agent2.err")"
jcheck "... and its GPU is offered (l40s-block now available)" "$(j alice profiles list)" \
	'.items[] | select(.name == "l40s-block") | .availability.now == true'
# The join token was exchanged for the node's credential, kept 0600.
cred=$(cat "$tmp/agent2/node.credential" 2>/dev/null)
[[ "$cred" == cnln_* ]] && [ "$(stat -c %a "$tmp/agent2/node.credential")" = 600 ] &&
	ok "the agent keeps its node credential (0600)" || bad "credential file: $(ls -l "$tmp/agent2")"
check "the join token is used up (401)" \
	[ "$(http "$jt" POST /v1/nodes '{"protocol":5,"name":"'"$node2"'","gpus":0,"cpu_milli":1,"mem_mib":1}')" = 401 ]
# Revocation: administrators only; the node is cut off and lost at once.
c bob node revoke "$node2"
expect "a user cannot revoke a node" 5
c admin node revoke "$node2"
expect "the admin revokes the node" 0 ''
grep -q "revoked" <<<"$out" || bad "revoke says so: $out"
nid2=$(j admin node list | jq -r '.items[] | select(.name == "'"$node2"'") | .id')
check "... its credential no longer works (401)" \
	[ "$(http "$cred" GET "/v1/nodes/$nid2/tunnels?wait=0")" = 401 ]
for _ in $(seq 50); do
	[ "$(j admin node list | jq -r '.items[] | select(.name == "'"$node2"'") | .state')" = lost ] && break
	sleep 0.2
done
jcheck "... it is lost: no new work" "$(j admin node list)" \
	'.items[] | select(.name == "'"$node2"'") | .state == "lost"'
jcheck "... and the revocation is audited" "$(j admin audit --limit 1000)" \
	'any(.items[]; .action == "node.revoke" and .target == "'"$node2"'")'
kill "$agent_pid" && wait "$agent_pid" 2>/dev/null
agent_pid=

# No secret is kept where an administrator reads the history.
c admin audit --limit 1000 -o json
leaks=0
for secret in "$alice_inv" "$bob_inv1" "$bob_inv2" "$erin_inv" "$ci" "$jt" "$cred" alice-password-1 bob-password-2; do
	grep -Fq -- "$secret" "$tmp/c.out" && leaks=$((leaks + 1))
done
[ "$rc" = 0 ] && [ -s "$tmp/c.out" ] && [ "$leaks" = 0 ] && ok "the audit holds no token, invitation or password" ||
	bad "audit: exit $rc, $leaks secrets in it"

# --- A restart: "default" comes on the first start only; all else stays ------
c admin project delete default --yes
expect "the admin deletes project default" 0
kill "$pid" && wait "$pid" 2>/dev/null
pid=
start_cnlabd
# It listens on another port now: a stored token goes to the server it
# came from only, so the administrator logs in there again.
c admin project list
expect "the old session is not sent to the restarted server's new address" 3 'not logged in'
cin "$(cat "$tmp/data/admin.password")" admin login --user admin --password-stdin
expect "the administrator logs in again" 0
check "after a restart there is no project default again" \
	[ "$(j admin project list | jq -c '[.items[].name]')" = '["system","teama","teamb"]' ]
cin "alice-password-1" alice login --user alice --password-stdin
expect "... a redeemed password still works" 0 'no project yet'
CNLAB_TOKEN=$ci CNLAB_CONFIG=$tmp/none.json "$cnlab" --server "$url" whoami >/dev/null 2>&1
rc=$?
check "... a revoked token stays revoked" [ "$rc" = 3 ]
cin "alice-password-3" alice login --invite "$alice_inv"
expect "... a used invitation stays used" 3

[ "$fails" = 0 ] || {
	echo "$fails check(s) failed"
	tail -20 "$tmp/err"
	exit 1
}
