#!/usr/bin/env bash
# demo.sh - the demo binary end to end: the tour ends with every invariant
# intact, site GPU types load from a JSON file, and bad files are refused
# with a message that names the file and the problem, exit status 1.
set -u
demo=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

expect() { # expect NAME STATUS PATTERN -- command...
	local name=$1 want=$2 pat=$3
	shift 4
	local out
	out=$("$@" 2>&1)
	local got=$?
	if [ "$got" != "$want" ] || ! grep -qE -- "$pat" <<<"$out"; then
		echo "FAIL $name: status $got (want $want), output:"
		echo "$out" | tail -5
		fails=$((fails + 1))
	else
		echo "ok   $name"
	fi
}

expect tour 0 'allocations left: 0, invariants: ok' -- "$demo"
expect tour-mig 0 'vision +25% of an H100 +-> h100-a/gpu1: MIG instance 2g.20gb' -- "$demo"
expect tour-host 0 'blocks in a 1g host instance 1g.10gb' -- "$demo"
expect catalog 0 '^H100-80GB-SXM +nvidia +132 +81559 +1g.10gb' -- "$demo" --catalog
expect site-types 0 '^B200-180GB +nvidia +148' -- "$demo" --gpu-types "$src/docs/examples/gpu-types.json" --catalog

echo '{"name": "X", "sm_count": 1}' >"$tmp/missing.json"
expect missing-field 1 "missing.json: GPU type \"X\": missing field \"vram_mib\"" -- "$demo" --gpu-types "$tmp/missing.json"
printf '{"name": ' >"$tmp/broken.json"
expect broken-json 1 "broken.json:1:[0-9]+: " -- "$demo" --gpu-types "$tmp/broken.json"
expect no-file 1 "$tmp/none.json: No such file or directory" -- "$demo" --gpu-types "$tmp/none.json"
echo '[{"name": "H100-80GB-SXM", "sm_count": 1, "vram_mib": 5}]' >"$tmp/dup.json"
expect duplicate 1 'H100-80GB-SXM" is already defined' -- "$demo" --gpu-types "$tmp/dup.json"
expect usage 2 'usage: cnlab-demo' -- "$demo" --bogus

echo "$((10 - fails)) passed, $fails failed"
[ "$fails" = 0 ]
