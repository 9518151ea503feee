#!/usr/bin/env bash
# Builds the desktop window (build tags desktop,production,webkit2_41) and
# checks it under Xvfb: starts `verdict window --demo` on the built-in model,
# waits until the page has reported ready through Wails' bindings and the demo
# run (on the sample text and a synthetic camera snapshot) has finished, checks
# that the page loaded the snapshot's preview, takes a screenshot of the screen and checks that it is not
# blank. Writes desktop.png and desktop.log to $VERDICT_TEST_OUT (default
# build/bin/test). Run by build/test.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source "$root/build/tools.sh"
for t in xvfb-run Xvfb xwd convert; do require_tool "$t"; done # build/setup-app.sh installs them
out=${VERDICT_TEST_OUT:-$root/build/bin/test}
mkdir -p "$out"
bin="$root/build/bin/verdict-desktop"
echo "desktop-check: building the window" >&2
go build -tags desktop,production,webkit2_41 -o "$bin" .

export VERDICT_CHECK_BIN="$bin" VERDICT_CHECK_LOG="$out/desktop.log" VERDICT_CHECK_SHOT="$out/desktop.png"
rm -f "$VERDICT_CHECK_LOG" "$VERDICT_CHECK_SHOT"
# WebKitGTK on a display without a GPU: software rendering.
export WEBKIT_DISABLE_DMABUF_RENDERER=1 LIBGL_ALWAYS_SOFTWARE=1 NO_AT_BRIDGE=1
# The synthetic camera: the demo runs on a snapshot too, and the page loads
# its 768×768 preview through the window's asset server.
export VERDICT_CAPTURE=synthetic
xvfb-run -a -s "-screen 0 1440x900x24" bash -c '
  set -u
  "$VERDICT_CHECK_BIN" window --demo --settings= --log-level debug >"$VERDICT_CHECK_LOG" 2>&1 &
  pid=$!
  ok=0
  for _ in $(seq 1 1800); do
    if grep -q "msg=\"run finished\"" "$VERDICT_CHECK_LOG"; then ok=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  sleep 2 # let the last events render
  xwd -root -silent | convert xwd:- png:"$VERDICT_CHECK_SHOT" || true
  kill $pid 2>/dev/null
  wait $pid 2>/dev/null
  [ $ok = 1 ]
' || { echo "desktop-check: the window did not finish its demo run; log:" >&2; cat "$VERDICT_CHECK_LOG" >&2; exit 1; }

grep -q 'msg="frontend ready" agent=' "$VERDICT_CHECK_LOG" || { echo "desktop-check: the page never called the Go side" >&2; cat "$VERDICT_CHECK_LOG" >&2; exit 1; }
grep 'msg="run finished"' "$VERDICT_CHECK_LOG" | grep -q 'generator=done.*scorer=done' ||
  { echo "desktop-check: the demo run did not finish both sides" >&2; cat "$VERDICT_CHECK_LOG" >&2; exit 1; }

grep -q 'msg="snapshot added"' "$VERDICT_CHECK_LOG" && grep -q 'msg="media preview served" .*file=model.png' "$VERDICT_CHECK_LOG" ||
  { echo "desktop-check: the window did not show the camera snapshot as the model receives it" >&2; cat "$VERDICT_CHECK_LOG" >&2; exit 1; }

if grep -E 'level=(error|fatal|panic)|level=warning msg="frontend' "$VERDICT_CHECK_LOG"; then
  echo "desktop-check: errors in the window's log (above)" >&2
  exit 1
fi

# Not blank: many colours and real contrast.
colors=$(convert "$VERDICT_CHECK_SHOT" -format '%k' info:)
stddev=$(convert "$VERDICT_CHECK_SHOT" -colorspace Gray -format '%[fx:standard_deviation]' info:)
echo "desktop-check: screenshot $VERDICT_CHECK_SHOT: $colors colours, grey standard deviation $stddev" >&2
awk -v c="$colors" -v s="$stddev" 'BEGIN { exit !(c >= 200 && s >= 0.05) }' ||
  { echo "desktop-check: the screenshot looks blank" >&2; exit 1; }
echo "desktop-check: ok"
