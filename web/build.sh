#!/bin/sh
# web/build.sh OUTDIR - build the dashboard's static files into OUTDIR.
# cnlabd embeds every file this writes into OUTDIR (see src/server for the
# asset table); OUTDIR must end up holding index.html and what it loads.
# Placeholder until the esbuild bundle lands: copies web/public.
set -eu
[ $# -eq 1 ] || { echo "usage: web/build.sh OUTDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
cp "$here"/public/* "$1"/
