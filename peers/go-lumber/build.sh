#!/usr/bin/env bash
# go-lumber's part of peers/build.sh: SRC_DIR (the go-lumber tree) -> OUT_DIR/bin/{ljserver,ljclient}.
# Debian's Go and klauspost/compress in GOPATH mode: offline, no module download.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SRC_DIR OUT_DIR (run through peers/build.sh)" >&2; exit 2; }
SRC=$(cd "$1" && pwd)
OUT=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
type need_debs >/dev/null 2>&1 || { echo "$0: run it through peers/build.sh" >&2; exit 2; }

need_debs golang-go golang-github-klauspost-compress-dev

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/gopath/src/github.com/elastic" "$WORK/gopath/src/refwire-peers"
cp -a "$SRC" "$WORK/gopath/src/github.com/elastic/go-lumber"
cp -a "$HERE/ljserver" "$HERE/ljclient" "$WORK/gopath/src/refwire-peers/"

export GO111MODULE=off GOFLAGS= GOPROXY=off CGO_ENABLED=0
export GOPATH=$WORK/gopath:/usr/share/gocode
# GOCACHE: Go's own (content-addressed, safe to share): a rebuild does not compile the standard library again.
mkdir -p "$OUT/bin"
for prog in ljserver ljclient; do
    (cd "$WORK/gopath/src/refwire-peers/$prog" && go build -trimpath -o "$OUT/bin/$prog" .)
done

{
    echo "go: $(go version)"
    echo "golang-go: $(dpkg-query -W -f='${Version}' golang-go)"
    echo "klauspost/compress: golang-github-klauspost-compress-dev $(dpkg-query -W -f='${Version}' golang-github-klauspost-compress-dev)"
    echo "go-lumber: $(cd "$SRC" && sed -n 's/^module //p' go.mod) (its go.mod pins klauspost/compress $(sed -n 's/^require github.com\/klauspost\/compress //p' "$SRC/go.mod"))"
} >"$OUT/versions.txt"
