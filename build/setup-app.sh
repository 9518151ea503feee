#!/usr/bin/env bash
# Installs what the app needs when it is missing, after build/setup.sh.
# Sourced by run.sh (VERDICT_APP_SETUP=run) and test.sh (VERDICT_APP_SETUP=test):
#
#   run:  GTK 3 and WebKitGTK 4.1 headers (the window, build tag webkit2_41),
#         Node.js >= 20.19 with npm, and the frontend's npm packages
#   test: also Debian's Chromium (end-to-end tests), Xvfb, xauth, x11-apps and
#         ImageMagick (the window's screenshot check), g++ and perl (the CUDA
#         sources' host emulation, build/cuda-syntax.sh)
#         and the MCP client test's npm packages (build/clients/mcp)
#         and the OpenAI client test's (build/clients/openai)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
what=${VERDICT_APP_SETUP:-run}

source "$root/build/tools.sh"

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in pkg-config libgtk-3-dev libwebkit2gtk-4.1-dev; do
  have_pkg "$p" || need+=("$p")
done
tools=(node npm)
if [ "$what" = test ]; then
  tool_ok chromium || need+=(chromium)
  tool_ok Xvfb && tool_ok xvfb-run || need+=(xvfb)
  tool_ok xauth || need+=(xauth)
  tool_ok xwd || need+=(x11-apps)
  tool_ok convert || need+=(imagemagick)
  # Fonts, so that screenshots show text.
  have_pkg fonts-dejavu-core || need+=(fonts-dejavu-core)
  tool_ok g++ || need+=(g++)
  tool_ok perl || need+=(perl)
  tools+=(chromium Xvfb xvfb-run xauth xwd convert g++ perl)
fi
{ tool_ok node && tool_ok npm; } || need+=(nodejs npm)
[ ${#need[@]} -eq 0 ] || apt_install setup-app "${need[@]}"
for t in "${tools[@]}"; do require_tool "$t"; done

# Vite 7 needs Node.js 20.19 or newer.
node_ok=$(node -e 'const [a,b]=process.versions.node.split(".").map(Number); console.log(a>20||(a===20&&b>=19)?1:0)')
if [ "$node_ok" != 1 ]; then
  echo "setup-app: Node.js $(node --version) is too old for the frontend: install Node.js 20.19 or newer" >&2
  exit 1
fi

# The frontend's packages, when missing or older than the lock file.
fe="$root/frontend"
if [ ! -d "$fe/node_modules" ] || [ "$fe/package-lock.json" -nt "$fe/node_modules/.package-lock.json" ]; then
  echo "setup-app: npm ci in frontend/" >&2
  (cd "$fe" && npm ci --no-audit --no-fund --loglevel=error)
fi

# The MCP client test's packages (build/clients/mcp: the official MCP
# TypeScript SDK), for the tests only.
if [ "$what" = test ]; then
  mc="$root/build/clients/mcp"
  if [ ! -d "$mc/node_modules" ] || [ "$mc/package-lock.json" -nt "$mc/node_modules/.package-lock.json" ]; then
    echo "setup-app: npm ci in build/clients/mcp/" >&2
    (cd "$mc" && npm ci --no-audit --no-fund --loglevel=error)
  fi
  # The OpenAI client test's packages (build/clients/openai: openai and the
  # Vercel AI SDK's OpenAI-compatible provider).
  oc="$root/build/clients/openai"
  if [ ! -d "$oc/node_modules" ] || [ "$oc/package-lock.json" -nt "$oc/node_modules/.package-lock.json" ]; then
    echo "setup-app: npm ci in build/clients/openai/" >&2
    (cd "$oc" && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
