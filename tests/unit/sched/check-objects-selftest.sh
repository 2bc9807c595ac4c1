#!/usr/bin/env bash
# check-objects-selftest.sh - scripts/check-objects must fail on what it
# guards against, and pass on clean code: tiny fixture objects with a call
# cycle between files, a cycle through a data reference, impure calls and
# writable globals, next to clean ones (a constant table of pointers, a
# one-way chain).  A check that cannot fail is a defect (STYLE.md).
#
# Usage: check-objects-selftest.sh CC CHECK_OBJECTS
set -euo pipefail
cc=$1
check=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fails=0

build() { # NAME SOURCE
	printf '%s\n' "$2" > "$1.c"
	"$cc" -std=gnu11 -O2 -c "$1.c" -o "$1.o"
}
expect() { # STATUS WHAT OUTPUT-PATTERN ARGS...
	local want=$1 what=$2 pat=$3 out rc
	shift 3
	set +e
	out=$("$check" "$@" 2>&1)
	rc=$?
	set -e
	if [ "$rc" != "$want" ] || ! grep -qE -- "$pat" <<<"$out"; then
		echo "FAIL: $what: status $rc (want $want), output:"
		echo "$out" | sed 's/^/    /'
		fails=$((fails + 1))
	else
		echo "ok: $what"
	fi
}

# A one-way chain low <- mid <- top, and a cycle a <-> b.
build low 'int low(int x); int low(int x) { return x + 1; }'
build mid 'int low(int); int mid(int x); int mid(int x) { return low(x) * 2; }'
build top 'int mid(int); int top(int x); int top(int x) { return mid(x) - 1; }'
build a 'int b(int); int a(int x); int a(int x) { return x ? b(x - 1) : 0; }'
build b 'int a(int); int b(int x); int b(int x) { return x ? a(x - 1) : 1; }'
# A cycle through data: a table of callbacks and a caller of the table.
build ops 'int run(int); const struct { int (*f)(int); } ops = {run};'
build run 'extern const struct { int (*f)(int); } ops;
int run(int x); int run(int x) { return x > 0 ? ops.f(x - 1) : x; }'
# Impure calls and writable data; a constant table of pointers.
build io '#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int io(void); int io(void) { printf("x"); return (int)time(NULL) + rand(); }'
build glob 'int counter; static int hidden = 3;
int bump(void); int bump(void) { static int calls; calls++; return ++counter + hidden++ + calls; }'
build table 'static const char *const names[] = {"a", "b"};
const char *const *table(void); const char *const *table(void) { return names; }
const struct { const char *const *v; } pub = {names};'

expect 0 "chain has no cycle" "no cycles between 3 units" \
	--cycles low.o mid.o top.o
expect 0 "chain is layered bottom up" "2: top" --cycles low.o mid.o top.o
expect 1 "call cycle between two files" "cycle between files: a b" \
	--cycles a.o b.o low.o
expect 1 "cycle through a data reference" "cycle between files: ops run" \
	--cycles ops.o run.o
expect 1 "cycle found in a directory of objects" "cycle between files" \
	--cycles .
printf '%s\n%s\n' "$tmp/low.o" "$tmp/a.o" > list
printf '%s\n' "$tmp/b.o" >> list
expect 1 "cycle found through an @list" "a -> b: b" --cycles @list
ar qc lib.a a.o b.o 2>/dev/null
expect 1 "cycle found in an archive" "cycle between files: a b" \
	--cycles lib.a
expect 1 "impure calls denied" "denied symbol: io: (printf|time|rand)" \
	--deny "$(dirname "$check")/impure-symbols" io.o
expect 0 "pure code passes the deny list" "no denied symbols" \
	--deny "$(dirname "$check")/impure-symbols" low.o table.o
expect 1 "global counter is writable" "writable data: glob: counter" \
	--no-writable glob.o
expect 1 "file-static variable is writable" "writable data: glob: hidden" \
	--no-writable glob.o
expect 0 "constant tables of pointers are read-only" "no writable data" \
	--no-writable table.o low.o
expect 2 "missing input is a usage error" "no such input" --cycles nothing.o

[ "$fails" = 0 ] || { echo "$fails self-test(s) failed"; exit 1; }
echo "check-objects self-test: all passed"
