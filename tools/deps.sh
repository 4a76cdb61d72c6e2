#!/bin/sh
# Installs the Debian packages seckill needs, skipping those already present.
#   sh tools/deps.sh          build, run and test (MariaDB and nginx included: the test
#                             suite runs on SQLite and on MariaDB, and the cluster tests
#                             put nginx in front of three instances)
#   sh tools/deps.sh perf     also wrk, for `make perf`
# Runs apt-get as root (through sudo when not root). Safe to run again.
set -eu
pkgs="build-essential pkg-config libevent-dev libhiredis-dev libjansson-dev libsqlite3-dev
      libhttp-parser-dev libcmocka-dev redis-server redis-tools python3 curl sqlite3
      libmariadb-dev mariadb-server mariadb-client python3-pymysql nginx-light libssl-dev"
# make check also fuzzes (clang's libFuzzer), runs TSan (gcc's libtsan) and valgrind
pkgs="$pkgs clang libclang-rt-dev valgrind"
# operators' tooling: prometheus + promtool for deploy/prometheus/ and its test
pkgs="$pkgs prometheus"
# make deb and its test: dpkg-shlibdeps (dpkg-dev), lintian, man (man-db)
pkgs="$pkgs dpkg-dev lintian man-db"
# the sale board's browser test: chromium, and node + npm for playwright-core (pinned in
# tests/browser/package-lock.json, installed below); a node already on PATH (e.g. from
# NodeSource, which bundles npm) is used as it is
pkgs="$pkgs chromium"
command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs"
command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
# the HTML reports' charts (seckill lab --html): dygraphs, inlined from this package
pkgs="$pkgs libjs-dygraphs"
if [ "${1:-}" = perf ]; then
    pkgs="$pkgs wrk"
fi
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# playwright-core for tests/browser, from the npm registry at the locked version.
npm_deps() {
    pw=tests/browser/node_modules/playwright-core/package.json
    want=$(sed -n 's/.*"playwright-core": *"\([0-9.]*\)".*/\1/p' tests/browser/package.json)
    if ! grep -q "\"version\": *\"$want\"" "$pw" 2>/dev/null; then
        (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
    fi
}
cd "$(dirname "$0")/.."
if [ -z "$missing" ]; then
    npm_deps
    exit 0
fi
echo "installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# policy-rc.d keeps the packages' own services (redis on 6379, nginx on 80, mariadb on
# 3306) from starting: seckill and its tests start their own, on ports of their choosing.
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
npm_deps
