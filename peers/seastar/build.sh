#!/usr/bin/env bash
# Seastar's part of peers/build.sh: SRC_DIR (the Seastar tree) -> OUT_DIR/bin/seastar-testee.
#
# The library is built as Seastar's own CMake build does it (CMake + Ninja, gcc, C++20, RelWithDebInfo at
# -O2 -g0 -DNDEBUG, no DPDK, no apps, tests or docs), less the sources RPC does not use (src/http/,
# src/json/, src/websocket/, src/core/prometheus.cc). Our testee (seastar_testee.cc) is added as one more
# demo, so it is compiled with the library's own flags. Objects stay beside SRC_DIR (the temporary
# directory peers/build.sh removes); only the program goes to OUT_DIR. About 13 min at -j2 on 2 cores.
# REFWIRE_PEER_JOBS: ninja's -j (default 2).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SRC_DIR OUT_DIR (run through peers/build.sh)" >&2; exit 2; }
SRC=$(cd "$1" && pwd)
OUT=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
type need_debs >/dev/null 2>&1 || { echo "$0: run it through peers/build.sh" >&2; exit 2; }
JOBS=${REFWIRE_PEER_JOBS:-2}
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "REFWIRE_PEER_JOBS must be a positive number, not '$JOBS'"

# Seastar's install-dependencies.sh for Debian, limited to what the library needs.
need_debs cmake ninja-build g++ pkg-config libboost-dev libboost-filesystem-dev libboost-program-options-dev \
    libboost-thread-dev libboost-test-dev libc-ares-dev libfmt-dev libgnutls28-dev libhwloc-dev libpciaccess-dev \
    liblz4-dev libnuma-dev libprotobuf-dev protobuf-compiler libsctp-dev liburing-dev libyaml-cpp-dev ragel \
    valgrind systemtap-sdt-dev xfslibs-dev

# The library without the sources RPC does not use (their names, one a line, in add_library (seastar ...)).
before=$(wc -l <"$SRC/CMakeLists.txt")
sed -i -E '/^  src\/(http|json|websocket)\/[^ ]*\.cc$/d; /^  src\/core\/prometheus\.cc$/d' "$SRC/CMakeLists.txt"
trimmed=$((before - $(wc -l <"$SRC/CMakeLists.txt")))
if [ "$trimmed" -eq 0 ]; then
    say "seastar: CMakeLists.txt's source list has changed; building the whole library (slower)"
else
    say "seastar: $trimmed sources RPC does not use left out of the library"
fi

# Our program, as one more demo (demos/CMakeLists.txt's seastar_add_demo: the library's flags, target demo_NAME).
cp "$HERE/seastar_testee.cc" "$SRC/demos/refwire_seastar_testee.cc"
printf '\nseastar_add_demo (refwire_seastar_testee\n  SOURCES refwire_seastar_testee.cc)\n' >>"$SRC/demos/CMakeLists.txt"

BUILD=$(dirname "$SRC")/build
say "seastar: cmake (build tree $BUILD)"
cmake -S "$SRC" -B "$BUILD" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g0 -DNDEBUG" \
    -DCMAKE_CXX_STANDARD=20 \
    -DSeastar_DEMOS=ON -DSeastar_APPS=OFF -DSeastar_TESTING=OFF -DSeastar_DOCS=OFF -DSeastar_DPDK=OFF \
    >"$BUILD.cmake.log" 2>&1 || { tail -40 "$BUILD.cmake.log" >&2; die "cmake failed"; }
# Two steps, so that the log says how far it got: the library (most of the time), then our program.
started=$(date +%s)
say "seastar: building the library (ninja -j$JOBS seastar; about 13 min at -j2)"
ninja -C "$BUILD" -j"$JOBS" seastar >&2
say "seastar: the library took $(($(date +%s) - started)) s; building seastar-testee"
ninja -C "$BUILD" -j"$JOBS" demo_refwire_seastar_testee >&2

mkdir -p "$OUT/bin"
install -m 755 "$BUILD/demos/refwire_seastar_testee_demo" "$OUT/bin/seastar-testee"
{
    echo "seastar: the pinned commit (build-info.txt), release 25.05.0 as pinned in peers/seastar/pin"
    echo "g++: $(g++ --version | head -1)"
    echo "cmake: $(cmake --version | head -1)"
    echo "ninja: $(ninja --version)"
    for p in libboost-dev libfmt-dev liblz4-dev libgnutls28-dev libc-ares-dev libhwloc-dev liburing-dev libyaml-cpp-dev libprotobuf-dev; do
        echo "$p: $(dpkg-query -W -f='${Version}' "$p")"
    done
    echo "flags: RelWithDebInfo -O2 -g0 -DNDEBUG, C++20, Seastar_DPDK=OFF; the library less src/http, src/json, src/websocket, src/core/prometheus.cc"
} >"$OUT/versions.txt"
