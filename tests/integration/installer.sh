#!/usr/bin/env bash
# installer.sh - the one-line CLI install against a real cnlabd:
#
#     curl -fsSL http://127.0.0.1:PORT/cli | sh
#
# Installs into $CNLAB_INSTALL_DIR, into ~/.local/bin (the system directory
# made unchoosable with CNLAB_SYSTEM_BIN_DIR) and into a writable system
# directory; checks each installed cnlab (mode 755, statically linked when
# the build makes it so, runs, bytes and SHA-256
# as cnlabd serves them) and the "cnlab login --server URL" line.  Runs the
# script under sh, dash, bash and busybox sh (with busybox's own wget and
# sha256sum only), with shasum or openssl as the only checksum tool, and
# through shellcheck -s sh.  Refusals: a binary changed after cnlabd took
# its checksum (nothing installed, an old cnlab left as it was), an
# unknown architecture or OS (a uname shim), no checksum tool; path
# traversal, links, folders and unknown names answer 404; a bad Host
# header 400; bad cli_dir and public_url settings stop cnlabd.
#
# Usage: installer.sh CNLABD CNLAB
set -u
cnlabd=$1
cnlab=$2
tmp=$(mktemp -d)
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
skip() { echo "skip $1"; }

export CNLAB_JWT_SECRET=integration-test-secret-0123456789abcdef
unset CNLAB_CLI_DIR CNLAB_PUBLIC_URL CNLAB_INSTALL_DIR CNLAB_SYSTEM_BIN_DIR \
	CNLAB_CONFIG CNLAB_SERVER XDG_CONFIG_HOME
# The installer remembers the server in the CLI's settings: never ours.
export HOME=$tmp/home-default

case $(uname -m) in
x86_64 | amd64) arch=x86_64 ;;
aarch64 | arm64) arch=aarch64 ;;
*) arch=$(uname -m) ;;
esac
file=cnlab-linux-$arch

# start NAME [ARGS...]: run cnlabd on port 0 with its own data directory;
# sets pid, port and url.  Waits for the "listening on" line for as long
# as cnlabd lives.
start() {
	local name=$1
	shift
	: >"$tmp/$name.out"
	"$cnlabd" --data-dir "$tmp/$name.data" --listen 127.0.0.1:0 "$@" \
		>"$tmp/$name.out" 2>"$tmp/$name.err" &
	pid=$!
	port=
	while kill -0 "$pid" 2>/dev/null; do
		port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' \
			"$tmp/$name.out")
		[ -n "$port" ] && break
		sleep 0.05
	done
	url=http://127.0.0.1:$port
	[ -n "$port" ]
}
stop() {
	kill -TERM "$pid"
	wait "$pid"
	pid=
}

# The served sum of NAME.
served_sum() {
	curl -fsS "$url/cli/SHA256SUMS" | awk -v f="$1" '$2 == f { print $1 }'
}

# check_installed WHAT DIR OUTFILE [HOME]: DIR/cnlab is the served binary,
# and the server is remembered in the settings under HOME.
check_installed() {
	local what=$1 dir=$2 out=$3 home=${4:-$HOME} want
	want=$(served_sum "$file")
	if [ ! -f "$dir/cnlab" ]; then
		bad "$what: no $dir/cnlab: $(cat "$out")"
		return
	fi
	[ "$(stat -c %a "$dir/cnlab")" = 755 ] && ok "$what: mode 755" ||
		bad "$what: mode $(stat -c %a "$dir/cnlab")"
	if [ -n "${CNL_EXPECT_STATIC_CLI:-}" ]; then
		file -L "$dir/cnlab" | grep -q 'statically linked' &&
			ok "$what: one statically linked executable" ||
			bad "$what: not static: $(file -L "$dir/cnlab")"
	fi
	"$dir/cnlab" version | grep -q '^cnlab ' && ok "$what: cnlab version runs" ||
		bad "$what: cnlab version: $("$dir/cnlab" version 2>&1)"
	[ -n "$want" ] && [ "$(sha256sum <"$dir/cnlab" | cut -d' ' -f1)" = "$want" ] &&
		cmp -s "$dir/cnlab" "$cnlab" && ok "$what: SHA-256 is the served one" ||
		bad "$what: installed $(sha256sum <"$dir/cnlab"), served $want"
	# The server is remembered (unless one was chosen before), so the
	# next step is a plain cnlab login, as in the seeds' Quickstart.
	grep -qxF "Next, log in to $url:" "$out" && grep -qxF "  cnlab login" "$out" &&
		ok "$what: prints the next step, cnlab login" ||
		bad "$what: no login line: $(cat "$out")"
	[ "$(HOME=$home "$dir/cnlab" config get server)" = "$url" ] &&
		ok "$what: the server is remembered" ||
		bad "$what: config: $(HOME=$home "$dir/cnlab" config show 2>&1)"
	# Nothing else is left there (no temporary file).
	[ "$(ls -A "$dir")" = cnlab ] && ok "$what: only cnlab in $dir" ||
		bad "$what: $dir holds $(ls -A "$dir")"
}

# --- The default: the cnlab beside cnlabd ----------------------------------
"$cnlabd" --help | grep -q '^| `cli_dir`' && "$cnlabd" --help | grep -q '^| `public_url`' &&
	ok "--help lists cli_dir and public_url" || bad "--help: $("$cnlabd" --help | grep -i cli)"

start default && ok "cnlabd listening" || bad "start: $(cat "$tmp/default.err")"
sums=$(curl -fsS "$url/cli/SHA256SUMS")
[ "$sums" = "$(sha256sum <"$cnlab" | cut -d' ' -f1)  $file" ] &&
	ok "SHA256SUMS lists the cnlab beside cnlabd as $file" || bad "SHA256SUMS: $sums"
ctype() { curl -sS -o /dev/null -w '%{http_code} %{content_type}' "$url$1"; }
[ "$(ctype /cli)" = "200 text/x-shellscript; charset=utf-8" ] &&
	[ "$(ctype /cli/SHA256SUMS)" = "200 text/plain; charset=utf-8" ] &&
	[ "$(ctype "/cli/$file")" = "200 application/octet-stream" ] &&
	ok "content types" || bad "content types: $(ctype /cli), $(ctype /cli/SHA256SUMS), $(ctype "/cli/$file")"
curl -fsS -o "$tmp/direct" "$url/cli/$file" && cmp -s "$tmp/direct" "$cnlab" &&
	ok "GET /cli/$file is the binary" || bad "GET /cli/$file differs"
curl -fsS "$url/cli" >"$tmp/install.sh"
grep -qx "CNLAB_URL='$url'" "$tmp/install.sh" &&
	grep -qx "CNLAB_PLATFORMS='linux-$arch'" "$tmp/install.sh" &&
	ok "the script names $url and linux-$arch" || bad "script settings: $(grep ^CNLAB "$tmp/install.sh")"

# The one-liner, exactly as users type it, into CNLAB_INSTALL_DIR.
curl -fsSL "$url/cli" | CNLAB_INSTALL_DIR="$tmp/prefix/bin" sh >"$tmp/o1" 2>&1 &&
	ok "curl | sh exits 0" || bad "curl | sh: $(cat "$tmp/o1")"
check_installed "CNLAB_INSTALL_DIR" "$tmp/prefix/bin" "$tmp/o1"
grep -q "is not on your PATH" "$tmp/o1" && ok "PATH hint when not on PATH" ||
	bad "no PATH hint: $(cat "$tmp/o1")"
# Again over the installed one, with the directory on PATH: replaced, no hint.
curl -fsSL "$url/cli" | PATH="$tmp/prefix/bin:$PATH" CNLAB_INSTALL_DIR="$tmp/prefix/bin" \
	sh >"$tmp/o2" 2>&1 && ! grep -q "not on your PATH" "$tmp/o2" &&
	ok "reinstall on PATH: no hint" || bad "reinstall: $(cat "$tmp/o2")"
check_installed "reinstall" "$tmp/prefix/bin" "$tmp/o2"

# A user who already chose another server keeps it, and is told --server.
mkdir -p "$tmp/home-other"
HOME="$tmp/home-other" "$tmp/prefix/bin/cnlab" config set server http://elsewhere.example:8080
curl -fsSL "$url/cli" | HOME="$tmp/home-other" CNLAB_INSTALL_DIR="$tmp/prefix/bin" \
	sh >"$tmp/o2b" 2>&1 && grep -qxF "  cnlab login --server $url" "$tmp/o2b" &&
	[ "$(HOME=$tmp/home-other "$tmp/prefix/bin/cnlab" config get server)" = \
		http://elsewhere.example:8080 ] &&
	ok "a server chosen before is kept; the next step names --server" ||
	bad "other server: $(cat "$tmp/o2b")"

# No CNLAB_INSTALL_DIR, no writable system directory: ~/.local/bin.
mkdir "$tmp/home"
curl -fsSL "$url/cli" | HOME="$tmp/home" CNLAB_SYSTEM_BIN_DIR="$tmp/no-such-dir" \
	sh >"$tmp/o3" 2>&1 && ok "HOME install exits 0" || bad "HOME install: $(cat "$tmp/o3")"
check_installed "HOME/.local/bin" "$tmp/home/.local/bin" "$tmp/o3" "$tmp/home"
[ ! -e "$tmp/no-such-dir" ] && ok "the unchoosable system directory was not made" ||
	bad "made $tmp/no-such-dir"
# A writable system directory comes before ~/.local/bin.
mkdir "$tmp/sysbin" "$tmp/home2"
curl -fsSL "$url/cli" | HOME="$tmp/home2" CNLAB_SYSTEM_BIN_DIR="$tmp/sysbin" \
	sh >"$tmp/o4" 2>&1 && [ ! -e "$tmp/home2/.local" ] &&
	ok "a writable system directory is chosen first" || bad "system dir: $(cat "$tmp/o4")"
check_installed "system directory" "$tmp/sysbin" "$tmp/o4" "$tmp/home2"

# --- Shells and tools --------------------------------------------------------
for sh in dash bash; do
	if ! command -v "$sh" >/dev/null; then
		bad "$sh is not installed (scripts/bootstrap installs it)"
		continue
	fi
	CNLAB_INSTALL_DIR="$tmp/$sh" "$sh" "$tmp/install.sh" >"$tmp/o.$sh" 2>&1 &&
		ok "$sh runs the installer" || bad "$sh: $(cat "$tmp/o.$sh")"
	check_installed "$sh" "$tmp/$sh" "$tmp/o.$sh"
done
# busybox sh with nothing but busybox applets: wget, sha256sum, busybox awk.
busybox=$(command -v busybox)
if [ -n "$busybox" ]; then
	mkdir "$tmp/bb"
	busybox --install -s "$tmp/bb"
	if [ -e "$tmp/bb/wget" ] && [ -e "$tmp/bb/sha256sum" ]; then
		mkdir -p "$tmp/home-bb"
		env -i PATH="$tmp/bb" HOME="$tmp/home-bb" CNLAB_INSTALL_DIR="$tmp/busybox" \
			"$busybox" sh "$tmp/install.sh" >"$tmp/o.bb" 2>&1 &&
			ok "busybox sh and wget run the installer" || bad "busybox: $(cat "$tmp/o.bb")"
		check_installed "busybox" "$tmp/busybox" "$tmp/o.bb" "$tmp/home-bb"
	else
		bad "busybox lacks wget or sha256sum"
	fi
else
	skip "busybox sh (busybox not installed; scripts/bootstrap installs it)"
fi
# The checksum tool's fallbacks: a PATH with only the tools named.
tools() {
	local dir=$1
	shift
	mkdir -p "$dir"
	for t in "$@"; do
		ln -s "$(command -v "$t")" "$dir/$t" || bad "no $t for the tool PATH"
	done
}
base="uname curl awk sed mktemp mkdir cp chmod mv rm cat"
# shellcheck disable=SC2086 # the tool lists are words
{
	tools "$tmp/t-openssl" $base openssl
	tools "$tmp/t-shasum" $base shasum
	tools "$tmp/t-none" $base
}
dash=$(command -v dash)
for t in openssl shasum; do
	PATH="$tmp/t-$t" CNLAB_INSTALL_DIR="$tmp/with-$t" "$dash" "$tmp/install.sh" \
		>"$tmp/o.$t" 2>&1 && ok "$t as the only checksum tool" || bad "$t: $(cat "$tmp/o.$t")"
	check_installed "$t" "$tmp/with-$t" "$tmp/o.$t"
done
PATH="$tmp/t-none" CNLAB_INSTALL_DIR="$tmp/with-none" "$dash" "$tmp/install.sh" >"$tmp/o.none" 2>&1
rc=$?
[ $rc != 0 ] && grep -q 'sha256sum, shasum or openssl' "$tmp/o.none" && [ ! -e "$tmp/with-none" ] &&
	ok "no checksum tool: refused, nothing installed" || bad "no checksum tool: rc=$rc $(cat "$tmp/o.none")"
if command -v shellcheck >/dev/null; then
	shellcheck -s sh "$tmp/install.sh" >"$tmp/sc" 2>&1 && ok "shellcheck -s sh" ||
		bad "shellcheck: $(cat "$tmp/sc")"
else
	skip "shellcheck (not installed)"
fi

# --- Unknown platforms: a uname that says otherwise ---------------------------
# fake_uname DIR OS ARCH
fake_uname() {
	mkdir -p "$1"
	printf '#!/bin/sh\ncase "$1" in -s) echo %s ;; -m) echo %s ;; *) echo %s ;; esac\n' \
		"$2" "$3" "$2" >"$1/uname"
	chmod +x "$1/uname"
}
fake_uname "$tmp/riscv" Linux riscv64
mkdir "$tmp/r-dir"
curl -fsSL "$url/cli" | PATH="$tmp/riscv:$PATH" CNLAB_INSTALL_DIR="$tmp/r-dir" sh >"$tmp/o.r" 2>&1
rc=$?
[ $rc != 0 ] && grep -q 'architecture riscv64' "$tmp/o.r" && grep -q "available: linux-$arch" "$tmp/o.r" &&
	[ -z "$(ls -A "$tmp/r-dir")" ] &&
	ok "riscv64 refused, naming what is available; nothing installed" ||
	bad "riscv64: rc=$rc $(cat "$tmp/o.r"); $(ls -A "$tmp/r-dir")"
grep -q '^Downloading' "$tmp/o.r" && bad "riscv64: downloaded before refusing"
fake_uname "$tmp/bsd" FreeBSD amd64
PATH="$tmp/bsd:$PATH" CNLAB_INSTALL_DIR="$tmp/b-dir" sh "$tmp/install.sh" >"$tmp/o.b" 2>&1
rc=$?
[ $rc != 0 ] && grep -q 'OS FreeBSD, architecture x86_64' "$tmp/o.b" && [ ! -e "$tmp/b-dir" ] &&
	ok "FreeBSD refused, naming OS and architecture" || bad "FreeBSD: rc=$rc $(cat "$tmp/o.b")"

# --- What is not served --------------------------------------------------------
# not_found PATH [CURL ARGS...]: 404 with the JSON error not_found.
not_found() {
	local p=$1 code body
	shift
	body=$(curl -sS "$@" -o - -w '\n%{http_code}' "$url$p")
	code=${body##*$'\n'}
	body=${body%$'\n'*}
	[ "$code" = 404 ] && [ "$(jq -r .error.code <<<"$body" 2>/dev/null)" = not_found ] &&
		ok "404 for $p" || bad "$p: $code $body"
}
not_found /cli/../cnlab.db --path-as-is
not_found /cli/%2e%2e
not_found /cli/%2e%2e%2fcnlab.db
not_found /cli/..%2F..%2Fetc%2Fpasswd
not_found /cli/cnlab-linux-riscv64
not_found /cli/CNLAB-LINUX-X86_64
not_found "/cli/$file.sig"
not_found /cli/SHA256SUMS/x
# A Host header that would not be safe in the script.
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Host: x'\$(touch $tmp/pwned)'" "$url/cli")
[ "$code" = 400 ] && ok "a bad Host header: 400" || bad "bad Host: $code"
curl -sS -H 'Host: [::1]:8080' "$url/cli" | grep -qx "CNLAB_URL='http://\[::1\]:8080'" &&
	ok "an IPv6 Host header" || bad "IPv6 Host"
stop

# --- cli_dir: what the operator published, checked at start-up ---------------
mkdir "$tmp/clidir"
cp "$cnlab" "$tmp/clidir/$file"
printf 'a darwin build\n' >"$tmp/clidir/cnlab-darwin-aarch64"
printf 'not served\n' >"$tmp/clidir/$file.old"
printf 'secret\n' >"$tmp/secret"
ln -s "$tmp/secret" "$tmp/clidir/cnlab-linux-link"
mkdir "$tmp/clidir/cnlab-linux-dir"
CNLAB_CLI_DIR=$tmp/clidir start clidir && ok "cnlabd with cli_dir" ||
	bad "start with cli_dir: $(cat "$tmp/clidir.err")"
sums=$(curl -fsS "$url/cli/SHA256SUMS")
want="$(sha256sum <"$tmp/clidir/cnlab-darwin-aarch64" | cut -d' ' -f1)  cnlab-darwin-aarch64
$(sha256sum <"$cnlab" | cut -d' ' -f1)  $file"
[ "$sums" = "$want" ] && ok "SHA256SUMS: the two plain files with good names" ||
	bad "SHA256SUMS with cli_dir: $sums"
not_found /cli/cnlab-linux-link
not_found /cli/cnlab-linux-dir
not_found "/cli/$file.old"
# Darwin on Apple silicon (arm64) gets cnlab-darwin-aarch64.
fake_uname "$tmp/mac" Darwin arm64
curl -fsSL "$url/cli" | PATH="$tmp/mac:$PATH" CNLAB_INSTALL_DIR="$tmp/mac-dir" sh >"$tmp/o.mac" 2>&1 &&
	cmp -s "$tmp/mac-dir/cnlab" "$tmp/clidir/cnlab-darwin-aarch64" &&
	ok "Darwin arm64 installs cnlab-darwin-aarch64" || bad "darwin: $(cat "$tmp/o.mac")"
# Before the change: the install works (so the refusal below is the sum's).
mkdir -p "$tmp/home-clidir"
curl -fsSL "$url/cli" | HOME="$tmp/home-clidir" CNLAB_INSTALL_DIR="$tmp/before" sh \
	>"$tmp/o.before" 2>&1 && ok "cli_dir install" || bad "cli_dir install: $(cat "$tmp/o.before")"
check_installed "cli_dir" "$tmp/before" "$tmp/o.before" "$tmp/home-clidir"
# The operator changes the binary after cnlabd took its checksum.
printf '#!/bin/sh\necho tampered\n' >"$tmp/clidir/$file"
old_sum=$(served_sum "$file")
new_sum=$(sha256sum <"$tmp/clidir/$file" | cut -d' ' -f1)
curl -fsS "$url/cli/$file" | cmp -s - "$tmp/clidir/$file" &&
	ok "the changed bytes are served with the old sum" || bad "not the changed bytes"
mkdir "$tmp/mm" "$tmp/mm-old" "$tmp/scratch"
printf 'old cnlab\n' >"$tmp/mm-old/cnlab"
chmod 755 "$tmp/mm-old/cnlab"
for sh in sh dash busybox; do
	[ $sh = busybox ] && [ -z "$busybox" ] && continue
	for dir in "$tmp/mm" "$tmp/mm-old"; do
		# TMPDIR: where the installer downloads (mktemp -d).
		if [ $sh = busybox ]; then
			run=(env -i PATH="$tmp/bb" CNLAB_INSTALL_DIR="$dir"
				TMPDIR="$tmp/scratch" "$busybox" sh)
		else
			run=(env CNLAB_INSTALL_DIR="$dir" TMPDIR="$tmp/scratch" "$sh")
		fi
		curl -fsSL "$url/cli" | "${run[@]}" >"$tmp/o.mm" 2>&1
		rc=$?
		msg=$(grep 'error:' "$tmp/o.mm")
		if [ $rc != 0 ] && grep -qi 'checksum' <<<"$msg" && grep -q "$file" <<<"$msg" &&
			grep -q "$old_sum" <<<"$msg" && grep -q "$new_sum" <<<"$msg"; then
			ok "$sh: mismatch refused, naming $file and both sums"
		else
			bad "$sh: mismatch: rc=$rc $(cat "$tmp/o.mm")"
		fi
		if [ "$dir" = "$tmp/mm" ]; then
			[ -z "$(ls -A "$dir")" ] && ok "$sh: mismatch left nothing in the install dir" ||
				bad "$sh: mismatch left $(ls -A "$dir")"
		else
			[ "$(ls -A "$dir")" = cnlab ] && [ "$(cat "$dir/cnlab")" = "old cnlab" ] &&
				ok "$sh: mismatch left the old cnlab as it was" ||
				bad "$sh: mismatch changed $dir: $(ls -A "$dir")"
		fi
		grep -q '^Installed' "$tmp/o.mm" && bad "$sh: mismatch says Installed"
		[ -z "$(ls -A "$tmp/scratch")" ] && ok "$sh: the download was deleted" ||
			bad "$sh: left in TMPDIR: $(ls -AR "$tmp/scratch")"
	done
done
# A restart publishes the new binary's sum.
stop
CNLAB_CLI_DIR=$tmp/clidir start clidir4 || bad "restart: $(cat "$tmp/clidir4.err")"
[ "$(served_sum "$file")" = "$new_sum" ] && ok "a restart publishes the new sum" ||
	bad "after restart: $(served_sum "$file")"
stop

# --- public_url, and settings that stop cnlabd --------------------------------
CNLAB_PUBLIC_URL=https://cnlab.example.org/lab/ start public ||
	bad "start with public_url: $(cat "$tmp/public.err")"
script=$(curl -fsS -H 'Host: ignored.example' "$url/cli")
grep -qx "CNLAB_URL='https://cnlab.example.org/lab'" <<<"$script" &&
	! grep -q ignored.example <<<"$script" &&
	ok "public_url is the URL in the script" || bad "public_url: $(grep ^CNLAB_URL <<<"$script")"
stop
for setting in "CNLAB_PUBLIC_URL=http://x'y" "CNLAB_PUBLIC_URL=ftp://x" \
	"CNLAB_CLI_DIR=$tmp/no-such-dir"; do
	: >"$tmp/bad.out"
	env "$setting" "$cnlabd" --data-dir "$tmp/bad.data" --listen 127.0.0.1:0 \
		>"$tmp/bad.out" 2>"$tmp/bad.err" &
	pid=$!
	# Until it exits; should it serve instead, stop it and say so.
	while kill -0 "$pid" 2>/dev/null; do
		if grep -q '^listening on' "$tmp/bad.out"; then
			bad "$setting: cnlabd started"
			kill "$pid"
		fi
		sleep 0.05
	done
	wait "$pid"
	rc=$?
	pid=
	key=${setting%%=*}
	key=${key#CNLAB_}
	grep -qi "${key}" "$tmp/bad.err" && [ $rc != 0 ] &&
		ok "$setting stops cnlabd, naming it" || bad "$setting: rc=$rc $(cat "$tmp/bad.err")"
done

[ "$fails" = 0 ] || {
	echo "$fails check(s) failed"
	exit 1
}
echo "all installer checks passed"
