#!/usr/bin/env bash
# Installs every Debian 12 package agentkv needs, then configures and builds it (build/).
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libhwy-dev nlohmann-json3-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libzstd-dev libxxhash-dev
  python3 python3-pytest
  nodejs                     # tests/server/test_node_sdk.py: the OpenAI Node SDK as a client
  chromium                   # the same file: the web UI in headless Chromium (playwright-core drives it)
  clang libclang-rt-14-dev   # libFuzzer targets
  nginx-light                # tests/server/test_cluster.py, deploy/: the router in front of instances
  libhiredis-dev redis-server  # the Redis page tier (--cache-redis) and its tests
  libpng-dev libjpeg62-turbo-dev  # image input (src/image/): PNG and JPEG decoding
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian's nodejs comes without npm; a nodejs that bundles it conflicts with the npm package.
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  # Services (nginx) are started by the tests that need them, on loopback: keep the packages from
  # starting them at install time (Debian's policy-rc.d convention).
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod +x "$policy"
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if [ -n "$policy" ]; then $SUDO rm -f "$policy"; fi
fi

# The Node client test's packages (versions pinned by package-lock.json).
# Again when the lock changed since the last install (npm writes node_modules/.package-lock.json).
if [ ! -d tests/server/node/node_modules ] ||
   [ tests/server/node/package-lock.json -nt tests/server/node/node_modules/.package-lock.json ]; then
  (cd tests/server/node && npm ci --no-audit --no-fund)
fi

if [ "${1:-}" != "--no-build" ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j"$(nproc)"
fi
