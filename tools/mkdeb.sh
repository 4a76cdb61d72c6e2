#!/bin/sh
# Builds the Debian package from a built binary, without debhelper or a debian/ tree:
#   sh tools/mkdeb.sh BUILD/seckill OUTDIR      -> OUTDIR/seckill_VERSION_ARCH.deb
# Contents: /usr/bin/seckill (stripped), seckill(1) generated from the binary's own --help
# texts (tools/manpage.py), the hardened systemd unit, /etc/seckill/seckill.conf (a
# conffile), the copyright and changelog; postinst creates the `seckill` system user.
# The packaging files live in deploy/deb/. `make deb` calls this; lintian checks the result.
set -eu
bin=$1
mkdir -p "$2"
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
src=$here/deploy/deb
version=$("$bin" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
# Reproducible dates: the last commit's, else now.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

rm -rf "$out/root"
root=$out/root
mkdir -p "$root/DEBIAN" "$root/usr/share/doc/seckill" "$root/usr/share/man/man1"
install -D -m 0755 "$bin" "$root/usr/bin/seckill"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/seckill"
python3 "$here/tools/manpage.py" "$bin" "$out/seckill.1"
gzip -9n -c "$out/seckill.1" > "$root/usr/share/man/man1/seckill.1.gz"
install -D -m 0644 "$src/seckill.service" "$root/lib/systemd/system/seckill.service"
install -D -m 0644 "$src/seckill.conf" "$root/etc/seckill/seckill.conf"
install -m 0644 "$src/copyright" "$root/usr/share/doc/seckill/copyright"
{
    printf 'seckill (%s) unstable; urgency=medium\n\n' "$version"
    printf '  * Package built from the seckill repository (commit %s).\n\n' \
        "$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    printf ' -- seckill maintainers <maintainers@users.noreply.a-seed-425fa0dd.example>  %s\n' \
        "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$root/usr/share/doc/seckill/changelog.gz"
install -m 0755 "$src/postinst" "$src/postrm" "$root/DEBIAN/"
echo /etc/seckill/seckill.conf > "$root/DEBIAN/conffiles"

# Shared-library dependencies as dpkg-shlibdeps computes them (it wants a debian/control).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/debian"
: > "$tmp/debian/control"
depends=$(cd "$tmp" && dpkg-shlibdeps -O "$root/usr/bin/seckill" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "mkdeb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
    -e "s/@DEPENDS@/$depends/" "$src/control.in" > "$root/DEBIAN/control"
find "$root" -type d -exec chmod 0755 {} +
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
    xargs -0 md5sum > DEBIAN/md5sums)
chmod 0644 "$root/DEBIAN/md5sums"
deb=$out/seckill_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
