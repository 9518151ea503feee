#!/usr/bin/env bash
# Installs a built verdict (bash build/run.sh builds ./verdict) for the current
# user: the binary in ~/.local/bin, the desktop entry and the icon.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${1:-$root/verdict}
[ -x "$bin" ] || { echo "install: no binary at $bin (run bash build/run.sh first)" >&2; exit 1; }
share=${XDG_DATA_HOME:-$HOME/.local/share}
install -Dm755 "$bin" "$HOME/.local/bin/verdict"
install -Dm644 "$root/build/linux/verdict.desktop" "$share/applications/verdict.desktop"
install -Dm644 "$root/build/appicon.png" "$share/icons/hicolor/512x512/apps/verdict.png"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database "$share/applications" || true
echo "installed verdict in $HOME/.local/bin and its desktop entry"
