#!/usr/bin/env bash
# Installs what building and testing Verdict needs when it is missing: a C
# compiler for the native kernels, curl, Go modules and the Gemma tokenizer.
# Sourced by run.sh and test.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

source "$root/build/tools.sh"

need_apt=()
tool_ok gcc || need_apt+=(gcc libc6-dev)
tool_ok curl || need_apt+=(curl ca-certificates)
[ ${#need_apt[@]} -eq 0 ] || apt_install setup "${need_apt[@]}"
require_tool gcc
require_tool curl
if ! tool_ok go && [ -x /usr/local/go/bin/go ]; then
  export PATH=$PATH:/usr/local/go/bin
fi
tool_ok go || { echo "setup: Go 1.26 or newer is required (https://go.dev/dl/): $(tool_check go)" >&2; exit 1; }
require_tool go
export CGO_ENABLED=1
(cd "$root" && go mod download)
bash "$root/build/fetch-tokenizer.sh" "$root/.cache/tokenizer/gemma3/tokenizer.json"

# media/ (owned by the media layer): ffmpeg/ffprobe for video input and for
# generating test audio and video, espeak-ng for test speech, webp (cwebp) for
# test WebP images, libasound2-dev + pkg-config for the cgo ALSA build of
# github.com/ebitengine/oto/v3 (playback) and of mediadevices' microphone
# driver; linux-libc-dev provides <linux/videodev2.h> for its camera driver.
media_apt=()
{ tool_ok ffmpeg && tool_ok ffprobe; } || media_apt+=(ffmpeg)
tool_ok espeak-ng || media_apt+=(espeak-ng)
tool_ok cwebp || media_apt+=(webp)
tool_ok djpeg || media_apt+=(libjpeg-turbo-progs) # JPEG decoded as PIL decodes it
tool_ok pkg-config || media_apt+=(pkg-config)
pkg-config --exists alsa 2>/dev/null || media_apt+=(libasound2-dev)
[ -f /usr/include/linux/videodev2.h ] || media_apt+=(linux-libc-dev)
[ ${#media_apt[@]} -eq 0 ] || apt_install setup "${media_apt[@]}"
for t in ffmpeg ffprobe espeak-ng cwebp djpeg pkg-config; do require_tool "$t"; done
