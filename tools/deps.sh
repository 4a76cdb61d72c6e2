#!/bin/sh
# Installs the Debian 12 packages seckill needs, skipping those already present.
#   sh tools/deps.sh          build and run: the compiler, pkg-config, the -dev libraries the
#                             Makefile links, and redis-server for the embedded default
#   sh tools/deps.sh test     also everything `make check` uses: cmocka, python3 + pymysql,
#                             MariaDB, nginx, the fuzz/TSan/valgrind tools, prometheus, the
#                             package tools, chromium + playwright-core for the browser tests
#   sh tools/deps.sh perf     also what `make perf` calls: nginx, redis-benchmark, wrk
# Runs apt-get as root (through sudo when not root). Safe to run again. When another apt or
# dpkg holds its lock (unattended-upgrades, a second install), it waits up to 10 minutes.
set -eu
set_=${1:-build}
case $set_ in
build | test | perf) ;;
*) echo "usage: sh tools/deps.sh [test|perf]" >&2; exit 2 ;;
esac

# build and run (Makefile: PKGS and -lhttp_parser; libcrypto comes with libssl-dev)
pkgs="build-essential pkg-config libevent-dev libhiredis-dev libjansson-dev libsqlite3-dev
      libmariadb-dev libssl-dev libhttp-parser-dev redis-server"
if [ "$set_" = test ]; then
    # unit tests (cmocka), the integration tests and their servers (tests/run.py)
    pkgs="$pkgs libcmocka-dev python3 python3-pymysql mariadb-server mariadb-client
          nginx-light redis-tools curl sqlite3"
    # make check also fuzzes (clang's libFuzzer), runs TSan (gcc's libtsan) and valgrind
    pkgs="$pkgs clang libclang-rt-dev valgrind"
    # deploy/prometheus/ and its test: prometheus + promtool
    pkgs="$pkgs prometheus"
    # make deb and its test: dpkg-shlibdeps (dpkg-dev), lintian, man (man-db)
    pkgs="$pkgs dpkg-dev lintian man-db"
    # the sale board's and the HTML reports' browser tests: chromium, and node + npm for
    # playwright-core (pinned in tests/browser/package-lock.json, installed below); a node
    # already on PATH (e.g. from NodeSource, which bundles npm) is used as it is
    pkgs="$pkgs chromium"
    # a CJK font, so the course pages' screenshots (tests/browser/course.mjs) show Chinese
    pkgs="$pkgs fonts-wqy-microhei"
    command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs"
    command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
    # the HTML reports' charts (seckill bench/lab --html): dygraphs, inlined from this package
    pkgs="$pkgs libjs-dygraphs"
fi
if [ "$set_" = perf ]; then
    # perf/run.sh: redis-benchmark and redis-cli, nginx, wrk, curl, sqlite3, python3
    pkgs="$pkgs redis-tools nginx-light wrk curl sqlite3 python3"
fi

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# playwright-core for tests/browser, from the npm registry at the locked version.
npm_deps() {
    [ "$set_" = test ] || return 0
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
# apt-get install waits for the dpkg lock by itself (DPkg::Lock::Timeout). apt 2.6's
# `apt-get update` ignores that setting for the package lists' lock and fails at once
# (exit 100, "Could not get lock /var/lib/apt/lists/lock"), so it is retried here.
wait_s=600
update() {
    waited=0
    while :; do
        if err=$($SUDO apt-get update -qq 2>&1 >/dev/null); then
            return 0
        fi
        case $err in
        *"Could not get lock"*) ;;
        *) printf '%s\n' "$err" >&2; return 1 ;;
        esac
        if [ "$waited" -ge "$wait_s" ]; then
            printf '%s\n' "$err" >&2
            return 1
        fi
        [ "$waited" -eq 0 ] && echo "waiting for another apt to release its lock..."
        sleep 2
        waited=$((waited + 2))
    done
}
update
# policy-rc.d keeps the packages' own services (redis on 6379, nginx on 80, mariadb on
# 3306) from starting: seckill and its tests start their own, on ports of their choosing.
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=$wait_s $missing
npm_deps
