#!/usr/bin/env bash
# TANK's part of peers/build.sh: SRC_DIR (the TANK tree) -> OUT_DIR/bin/{tank,tank-cli,tank-client}.
# TANK's own Makefile (its "lean Switch" branch: the bundled Switch, snappy and ebtree)
# with Debian's clang 14 and libc++ 14; the binaries are stripped of their debug info.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SRC_DIR OUT_DIR (run through peers/build.sh)" >&2; exit 2; }
SRC=$(cd "$1" && pwd)
OUT=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
type need_debs >/dev/null 2>&1 || { echo "$0: run it through peers/build.sh" >&2; exit 2; }

# libboost-dev: service_json.cpp includes Boost's header-only spreadsort (no Boost library is linked).
need_debs make binutils clang-14 libc++-14-dev libc++abi-14-dev zlib1g-dev libboost-dev

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp -a "$SRC" "$WORK/tank"
JOBS=$(nproc 2>/dev/null || echo 2)
# CC and CXX on the command line reach the sub-makes (Switch/, its snappy and ebtree), whose
# Makefiles say clang and clang++; HOST: the Makefile takes another branch on its authors' two hosts.
(cd "$WORK/tank" && make -s -j"$JOBS" CC=clang-14 CXX=clang++-14 HOST=refwire service cli-tool >&2)

mkdir -p "$OUT/bin"
for prog in tank tank-cli; do
    install -m 0755 "$WORK/tank/$prog" "$OUT/bin/$prog"
    strip --strip-debug "$OUT/bin/$prog"
done
install -m 0755 "$HERE/tank-client" "$OUT/bin/tank-client"

{
    echo "tank: TANK_VERSION $(sed -n 's/^#define TANK_VERSION *//p' "$SRC/common.h") (common.h), built with its own Makefile (-Ofast), debug info stripped"
    echo "clang: $(clang++-14 --version | head -n1) (clang-14 $(dpkg-query -W -f='${Version}' clang-14))"
    echo "libc++: libc++-14-dev $(dpkg-query -W -f='${Version}' libc++-14-dev), libc++abi-14-dev $(dpkg-query -W -f='${Version}' libc++abi-14-dev)"
    echo "zlib: zlib1g-dev $(dpkg-query -W -f='${Version}' zlib1g-dev)"
    echo "boost (headers): libboost-dev $(dpkg-query -W -f='${Version}' libboost-dev)"
    echo "snappy, ebtree: bundled with TANK (Switch/ext_snappy, Switch/ext/ebtree)"
} >"$OUT/versions.txt"
