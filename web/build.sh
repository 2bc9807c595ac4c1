#!/bin/sh
# web/build.sh OUTDIR - build the dashboard's static files into OUTDIR.
# cnlabd embeds every file this writes into OUTDIR (see src/server for the
# asset table), so OUTDIR ends up holding exactly:
#   index.html  web/public/index.html (no inline script or style: the CSP
#               is script-src 'self'; style-src 'self')
#   app.js      web/src/main.js and what it imports (preact, htm, uPlot),
#               bundled and minified by esbuild, no source map
#   app.css     the CSS those modules import (web/src/app.css, uPlot's)
# Everything comes from web/node_modules, which scripts/bootstrap installs
# with `npm ci` from web/package-lock.json: nothing is fetched here.
set -eu
[ $# -eq 1 ] || { echo "usage: web/build.sh OUTDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
esbuild=$here/node_modules/.bin/esbuild
if [ ! -x "$esbuild" ] || [ ! -d "$here/node_modules/preact" ]; then
	echo "web/node_modules missing: run scripts/bootstrap" >&2
	exit 1
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
# Only what this build writes: a file left from an older build would be
# embedded too.
rm -f "$out/index.html" "$out/app.js" "$out/app.css"
"$esbuild" "$here/src/main.js" --bundle --minify --format=iife \
	--target=es2020 --legal-comments=none --log-level=warning \
	--outfile="$out/app.js"
cp "$here/public/index.html" "$out/index.html"
[ -s "$out/app.js" ] && [ -s "$out/app.css" ] || {
	echo "web/build.sh: esbuild wrote no app.js/app.css" >&2
	exit 1
}
