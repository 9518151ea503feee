#!/usr/bin/env bash
# Sourced by the build scripts: finds the tools they need by what the tools
# print, not by their name alone. A `convert` that is not ImageMagick, or a
# `chromium` that is only a stub asking for a snap, counts as missing.
#
#   tool_ok NAME       true when the PATH holds the real NAME
#   tool_path NAME     prints the path of the first real NAME on the PATH
#   tool_check NAME    prints "NAME: ok (PATH)" or "NAME: missing (why)";
#                      returns as tool_ok does
#   require_tool NAME  exits with that message when there is no real NAME,
#                      and puts the real one first on the PATH
#
# Each tool is run once with the arguments below (stdin empty, at most 20 s)
# and its output, stdout and stderr together, must match the pattern.

# _tool_spec NAME sets _tool_args (the arguments) and _tool_re (an extended
# regular expression the output must match); it fails for a tool it does not
# know.
_tool_spec() {
  _tool_args=(--version)
  case $1 in
    gcc) _tool_re='Free Software Foundation' ;;
    g++) _tool_re='Free Software Foundation' ;;
    perl) _tool_args=(-e 'print "perl $]\n"') _tool_re='^perl 5\.' ;;
    curl) _tool_re='^curl [0-9]' ;;
    go) _tool_args=(version) _tool_re='^go version go[0-9]' ;;
    ffmpeg) _tool_args=(-version) _tool_re='^ffmpeg version' ;;
    ffprobe) _tool_args=(-version) _tool_re='^ffprobe version' ;;
    espeak-ng) _tool_re='eSpeak NG' ;;
    cwebp) _tool_args=(-h) _tool_re='cwebp \[options\]' ;;
    djpeg) _tool_args=(-version) _tool_re='libjpeg' ;;
    pkg-config) _tool_args=(--help) _tool_re='^([Uu]sage: +| +)([^ ]*/)?(pkg-config|pkgconf) \[OPTION' ;;
    chromium) _tool_re='^Chromium [0-9]' ;;
    Xvfb) _tool_args=(-help) _tool_re='^-fbdir ' ;;
    xvfb-run) _tool_args=(--help) _tool_re='^Usage: xvfb-run' ;;
    xauth) _tool_args=(-h) _tool_re='^usage: +([^ ]*/)?xauth ' ;;
    xwd) _tool_args=(-display) _tool_re='^Usage: ([^ ]*/)?xwd ' ;; # any other call needs a display
    convert) _tool_args=(-version) _tool_re='^Version: ImageMagick' ;;
    node) _tool_args=(-e 'console.log("node " + process.versions.node)') _tool_re='^node [0-9]+\.' ;;
    npm) _tool_args=(help) _tool_re='^npm <command>' ;;
    tar) _tool_re='GNU tar|bsdtar' ;;
    gzip) _tool_re='^(Apple )?gzip [0-9]' ;;
    mktemp) _tool_re='^mktemp \(GNU coreutils\)' ;;
    # The checksums of empty input.
    sha1sum) _tool_args=() _tool_re='^da39a3ee5e6b4b0d3255bfef95601890afd80709 ' ;;
    sha256sum) _tool_args=() _tool_re='^e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 ' ;;
    sha512sum) _tool_args=() _tool_re='^cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e ' ;;
    *) return 1 ;;
  esac
}

# _tool_try PATH: true when the program at PATH prints what _tool_spec wants;
# sets _tool_out to its output.
_tool_try() {
  if command -v timeout >/dev/null 2>&1; then
    _tool_out=$(timeout 20 "$1" "${_tool_args[@]}" </dev/null 2>&1) || true
  else
    _tool_out=$("$1" "${_tool_args[@]}" </dev/null 2>&1) || true
  fi
  grep -Eq -- "$_tool_re" <<<"$_tool_out"
}

# tool_path NAME prints the path of the first real NAME on the PATH (later
# entries are tried when an earlier one is another program).
tool_path() {
  local p
  _tool_spec "$1" || return 2
  while IFS= read -r p; do
    [ -n "$p" ] && _tool_try "$p" && { echo "$p"; return 0; }
  done < <(type -aP "$1" 2>/dev/null | awk '!seen[$0]++')
  return 1
}

tool_check() {
  local name=$1 path first
  if ! _tool_spec "$name"; then
    echo "$name: missing (build/tools.sh does not know how to recognise it)"
    return 2
  fi
  if path=$(tool_path "$name"); then
    echo "$name: ok ($path)"
    return 0
  fi
  first=$(type -P "$name" 2>/dev/null) || first=
  if [ -z "$first" ]; then
    echo "$name: missing (not on the PATH)"
    return 1
  fi
  _tool_try "$first" || true
  local out
  out=$(head -n 1 <<<"$_tool_out")
  echo "$name: missing ($first is another program: \`$name ${_tool_args[*]}\` printed \"${out:0:120}\")"
  return 1
}

tool_ok() { tool_check "$1" >/dev/null; }

# require_tool NAME exits with tool_check's message when there is no real
# NAME. When another program of that name comes first on the PATH, a link to
# the real one in $VERDICT_TOOLS_DIR (default build/bin/tools) is put first on
# the PATH, for this script and what it runs.
require_tool() {
  local msg real first dir
  msg=$(tool_check "$1") || { echo "$msg" >&2; exit 1; }
  real=$(tool_path "$1")
  first=$(type -P "$1")
  if [ "$real" != "$first" ]; then
    dir=${VERDICT_TOOLS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bin/tools}
    mkdir -p "$dir"
    ln -sfn "$real" "$dir/$1"
    case ":$PATH:" in *":$dir:"*) ;; *) export PATH="$dir:$PATH" ;; esac
    hash -r
    echo "tools: $first is not $1; using $real" >&2
  fi
}

# apt_install WHO PACKAGE... installs Debian packages (through sudo unless
# root); WHO names the script in its message.
apt_install() {
  local who=$1 sudo_cmd=""
  shift
  echo "$who: installing $*" >&2
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "$@"
}
