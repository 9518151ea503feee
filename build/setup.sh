#!/usr/bin/env bash
# Installs what building and testing Verdict needs when it is missing: a C
# compiler for the native kernels, curl, Go modules and the Gemma tokenizer.
# Sourced by run.sh and test.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

need_apt=()
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v curl >/dev/null 2>&1 || need_apt+=(curl ca-certificates)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${need_apt[@]}"
fi
if ! command -v go >/dev/null 2>&1; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH=$PATH:/usr/local/go/bin
  else
    echo "setup: Go 1.26 or newer is required (https://go.dev/dl/)" >&2
    exit 1
  fi
fi
export CGO_ENABLED=1
(cd "$root" && go mod download)
bash "$root/build/fetch-tokenizer.sh" "$root/.cache/tokenizer/gemma3/tokenizer.json"

# media/ (owned by the media layer): ffmpeg/ffprobe for video input and for
# generating test audio and video, espeak-ng for test speech, webp (cwebp) for
# test WebP images, libasound2-dev + pkg-config for the cgo ALSA build of
# github.com/ebitengine/oto/v3 (playback) and of mediadevices' microphone
# driver; linux-libc-dev provides <linux/videodev2.h> for its camera driver.
media_apt=()
command -v ffmpeg >/dev/null 2>&1 || media_apt+=(ffmpeg)
command -v espeak-ng >/dev/null 2>&1 || media_apt+=(espeak-ng)
command -v cwebp >/dev/null 2>&1 || media_apt+=(webp)
command -v djpeg >/dev/null 2>&1 || media_apt+=(libjpeg-turbo-progs) # JPEG decoded as PIL decodes it
command -v pkg-config >/dev/null 2>&1 || media_apt+=(pkg-config)
pkg-config --exists alsa 2>/dev/null || media_apt+=(libasound2-dev)
[ -f /usr/include/linux/videodev2.h ] || media_apt+=(linux-libc-dev)
if [ ${#media_apt[@]} -gt 0 ]; then
  echo "setup: installing ${media_apt[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${media_apt[@]}"
fi
