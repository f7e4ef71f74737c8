#!/usr/bin/env bash
# Build one real peer (a third-party implementation refwire is tested against)
# from its pinned source, once per machine, and print the directory holding it.
#
#   peers/build.sh PEER          # PEER: a directory of peers/ (go-lumber, logstash)
#
# The source is the snapshot ${REFWIRE_PEER_SOURCES}/<archive> when present (and no
# URL or commit override is set), else a `git clone` of the public repository at
# the pinned commit.  peers/<peer>/pin names the archive, URL and commit;
# REFWIRE_PEER_<NAME>_URL and REFWIRE_PEER_<NAME>_COMMIT override the last two
# (<NAME>: the peer's name upper-cased, '-' -> '_'; a commit is 40 hex digits).
#
# The build goes to ${REFWIRE_PEER_CACHE}/<peer>-<commit12>-<hash12>/, hash12 being
# a sha256 over our own build files for the peer (this script, peers/<peer>/**):
# made in a temporary directory beside it and renamed into place, so the cache
# holds whole builds only.  When that directory exists nothing is done.  The
# last line printed on stdout is the directory; the progress goes to stderr.
# Exit status 3: no source (no snapshot, and the clone cannot fetch).
set -euo pipefail

usage() {
    echo "usage: $0 PEER   (one of: $(cd "$PEERS" && for d in */; do [ -f "$d/pin" ] && printf '%s ' "${d%/}"; done))" >&2
    exit 2
}
die() {
    echo "peers/build.sh: $*" >&2
    exit 1
}
say() { echo "peers/build.sh: $*" >&2; }
#: exit status when the source cannot be had at all (no snapshot, the clone unreachable):
#: the tests skip then, even with CI=true, saying so; any other failure is a failure
NO_SOURCE=3

PEERS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$PEERS")
[ $# -eq 1 ] || usage
PEER=$1
case $PEER in */* | .* | "") usage ;; esac
[ -f "$PEERS/$PEER/pin" ] && [ -f "$PEERS/$PEER/build.sh" ] || usage

# need_debs PKG...: install the Debian packages that are missing (root only).
need_debs() {
    local missing=() p
    command -v dpkg-query >/dev/null 2>&1 || die "no dpkg-query: these Debian packages are needed: $*"
    for p in "$@"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ]; then
        die "missing Debian packages: ${missing[*]} -- install them with: sudo apt-get install -y --no-install-recommends ${missing[*]}"
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Another build (or apt) may hold dpkg's lock: wait for it rather than fail.
    local lock=(-o DPkg::Lock::Timeout=900)
    if ! apt-get install "${lock[@]}" -y -qq --no-install-recommends "${missing[@]}" >&2; then
        apt-get update "${lock[@]}" -qq >&2
        apt-get install "${lock[@]}" -y -qq --no-install-recommends "${missing[@]}" >&2
    fi
}
export -f need_debs die say

# ---------------------------------------------------------------- the pinned source
PIN_ARCHIVE='' PIN_URL='' PIN_COMMIT=''
# shellcheck source=/dev/null
. "$PEERS/$PEER/pin"
NAME=$(printf '%s' "$PEER" | tr 'a-z-' 'A-Z_')
url_var="REFWIRE_PEER_${NAME}_URL" commit_var="REFWIRE_PEER_${NAME}_COMMIT"
URL=${!url_var:-$PIN_URL}
COMMIT=${!commit_var:-$PIN_COMMIT}
[[ $COMMIT =~ ^[0-9a-f]{40}$ ]] || die "$commit_var must be a full commit id (40 hex digits), not '$COMMIT'"
# Default: ../shared/peer-sources beside the checkout (offline snapshots of the public sources).
SOURCES=${REFWIRE_PEER_SOURCES:-$ROOT/../shared/peer-sources}
[ -d "$SOURCES" ] && SOURCES=$(cd "$SOURCES" && pwd)
ARCHIVE=$SOURCES/$PIN_ARCHIVE
use_archive=0
if [ -z "${!url_var:-}" ] && [ -z "${!commit_var:-}" ] && [ -f "$ARCHIVE" ]; then
    use_archive=1
fi

# ---------------------------------------------------------------- the cache key
hash12=$(
    cd "$ROOT"
    { echo peers/build.sh; find "peers/$PEER" -type f; } | LC_ALL=C sort | while IFS= read -r f; do
        printf '%s %s\n' "$(sha256sum <"$f" | cut -c1-64)" "$f"
    done | sha256sum | cut -c1-12
)
CACHE=${REFWIRE_PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/refwire/peers}
KEY=$PEER-${COMMIT:0:12}-$hash12
DEST=$CACHE/$KEY
if [ -d "$DEST" ]; then
    echo "$DEST"
    exit 0
fi

mkdir -p "$CACHE"
# Temporary directories of builds whose process is gone (killed hard) are removed.
for stale in "$CACHE"/.tmp-*; do
    [ -d "$stale" ] || continue
    pid=${stale##*-}
    [[ $pid =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null && rm -rf "$stale"
done
TMP=$CACHE/.tmp-$KEY-$$
rm -rf "$TMP"
mkdir -p "$TMP/out" "$TMP/src"
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

started=$(date +%s)
if [ "$use_archive" = 1 ]; then
    say "$PEER: source from the snapshot $ARCHIVE"
    if command -v git >/dev/null 2>&1; then  # `git archive` wrote the commit into the archive
        got=$(gzip -dc "$ARCHIVE" | git get-tar-commit-id || true)
        [ "$got" = "$COMMIT" ] || die "$ARCHIVE is commit '${got:-unknown}', not the pinned $COMMIT"
    fi
    tar -xzf "$ARCHIVE" -C "$TMP/src"
    # `git archive --prefix=NAME/`: one top directory holds the tree.
    tops=("$TMP"/src/*)
    if [ ${#tops[@]} -eq 1 ] && [ -d "${tops[0]}" ]; then SRC=${tops[0]}; else SRC=$TMP/src; fi
    origin="snapshot $PIN_ARCHIVE"
else
    say "$PEER: source from git clone $URL at $COMMIT"
    need_debs git ca-certificates
    SRC=$TMP/src/$PEER
    git init -q "$SRC"
    git -C "$SRC" remote add origin "$URL"
    # One commit, no history; a server refusing to fetch a bare commit id gets a full clone.
    if ! git -C "$SRC" fetch -q --depth 1 origin "$COMMIT" 2>/dev/null; then
        if ! git -C "$SRC" fetch -q origin; then
            echo "peers/build.sh: no source for $PEER: no snapshot $ARCHIVE, and cannot fetch $URL" >&2
            exit "$NO_SOURCE"
        fi
    fi
    git -C "$SRC" -c advice.detachedHead=false checkout -q "$COMMIT" || die "$URL has no commit $COMMIT"
    rm -rf "$SRC/.git"
    origin="git $URL"
fi

say "$PEER: building (peers/$PEER/build.sh)"
"$PEERS/$PEER/build.sh" "$SRC" "$TMP/out"
{
    echo "peer: $PEER"
    echo "commit: $COMMIT"
    echo "source: $origin"
    echo "build files: sha256 $hash12"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - started)) s"
} >"$TMP/out/build-info.txt"

# Into place in one rename; a build that finished first wins (same inputs, same result).
if ! mv -T "$TMP/out" "$DEST" 2>/dev/null; then
    [ -d "$DEST" ] || die "cannot move the build to $DEST"
fi
say "$PEER: built in $(($(date +%s) - started)) s"
echo "$DEST"
