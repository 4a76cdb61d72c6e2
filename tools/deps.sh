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
      libmariadb-dev mariadb-server mariadb-client python3-pymysql nginx-light"
# make check also fuzzes (clang's libFuzzer), runs TSan (gcc's libtsan) and valgrind (issue 6)
pkgs="$pkgs clang libclang-rt-dev valgrind"
# operators' tooling (issue 14): prometheus + promtool for deploy/prometheus/ and its test
pkgs="$pkgs prometheus"
# make deb and its test: dpkg-shlibdeps (dpkg-dev), lintian, man (man-db)
pkgs="$pkgs dpkg-dev lintian man-db"
if [ "${1:-}" = perf ]; then
    pkgs="$pkgs wrk"
fi
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
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
