#!/usr/bin/env bash
# Logstash's part of peers/build.sh: SRC_DIR (the logstash-input-beats tree) ->
# OUT_DIR/{classes,lib,bin/logstash-beats}.  The plugin's Java classes
# (org.logstash.beats, org.logstash.netty) and our BeatsInputPeer main, compiled
# with javac --release 17 against Debian's jars, which are copied into lib/ so
# the versions recorded in versions.txt are the ones that run.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SRC_DIR OUT_DIR (run through peers/build.sh)" >&2; exit 2; }
SRC=$(cd "$1" && pwd)
OUT=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
type need_debs >/dev/null 2>&1 || { echo "$0: run it through peers/build.sh" >&2; exit 2; }

# A javac for Java 17: the one on PATH when it can, else Debian's JDK 17.
JAVAC=$(command -v javac || true)
if [ -z "$JAVAC" ] || ! "$JAVAC" --release 17 -version >/dev/null 2>&1; then
    need_debs openjdk-17-jdk-headless
    JAVAC=$(ls /usr/lib/jvm/java-17-openjdk-*/bin/javac | head -n1)
fi
JDK_BIN=$(dirname "$(readlink -f "$JAVAC")")
need_debs libnetty-java libjackson2-core-java libjackson2-databind-java libjackson2-annotations-java liblog4j2-java

JARS="netty-buffer netty-codec netty-common netty-handler netty-resolver netty-transport
      jackson-core jackson-databind jackson-annotations log4j-api log4j-core"
mkdir -p "$OUT/lib" "$OUT/classes" "$OUT/bin"
for j in $JARS; do cp -L "/usr/share/java/$j.jar" "$OUT/lib/"; done

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/java/org/logstash"
cp -a "$SRC/src/main/java/org/logstash/beats" "$SRC/src/main/java/org/logstash/netty" "$WORK/java/org/logstash/"
# Runner.java: the plugin's demo main (not needed).  Message.java registers Jackson's
# Afterburner module (a bytecode speed-up, not in Debian): the plain ObjectMapper instead.
rm "$WORK/java/org/logstash/beats/Runner.java"
msg=$WORK/java/org/logstash/beats/Message.java
sed -i -e '/^import com\.fasterxml\.jackson\.module\.afterburner\.AfterburnerModule;$/d' \
    -e 's/new ObjectMapper()\.registerModule(new AfterburnerModule())/new ObjectMapper()/' "$msg"
if grep -q Afterburner "$msg"; then die "Message.java: the Afterburner registration did not come out (the source changed?)"; fi

find "$WORK/java" "$HERE/src" -name '*.java' >"$WORK/sources"
"$JAVAC" --release 17 -nowarn -encoding UTF-8 -cp "$OUT/lib/*" -d "$OUT/classes" @"$WORK/sources"
cp "$HERE/log4j2.properties" "$OUT/"

cat >"$OUT/bin/logstash-beats" <<EOF
#!/bin/sh
# Logstash's Beats input server (see peers/logstash/).  JAVA_OPTS replaces the heap
# settings (Logstash's jvm.options: -Xms1g -Xmx1g).
D=\$(cd "\$(dirname "\$0")/.." && pwd)
JAVA=$JDK_BIN/java
[ -x "\$JAVA" ] || JAVA=java
exec "\$JAVA" \${JAVA_OPTS:--Xms1g -Xmx1g} -Dfile.encoding=UTF-8 \\
    -Dlog4j2.configurationFile="\$D/log4j2.properties" \\
    -cp "\$D/classes:\$D/lib/*" refwire.peers.BeatsInputPeer "\$@"
EOF
chmod +x "$OUT/bin/logstash-beats"

jar_version() {  # the version a jar states: its manifest's Bundle-Version, else its Maven pom.properties
    (
        cd "$WORK" && rm -rf META-INF && "$JDK_BIN/jar" xf "$OUT/lib/$1.jar" META-INF
        v=$(sed -n 's/^Bundle-Version: *//p' META-INF/MANIFEST.MF 2>/dev/null | tr -d '\r' | head -n1)
        [ -n "$v" ] || v=$(find META-INF/maven -name pom.properties -exec sed -n 's/^version=//p' {} + 2>/dev/null | head -n1)
        echo "${v:-unknown}"
    )
}
constraints() {  # Jackson's StreamReadConstraints: present or not, and its defaults
    local c=com.fasterxml.jackson.core.StreamReadConstraints defaults
    if "$JDK_BIN/jar" tf "$OUT/lib/jackson-core.jar" | grep -qx "${c//.//}.class"; then
        defaults=$("$JDK_BIN/javap" -constants -cp "$OUT/lib/jackson-core.jar" "$c" |
            sed -n 's/.* DEFAULT_\([A-Z_]*\) = \([0-9L]*\);/\1 \2/p' | paste -sd, - | sed 's/,/, /g')
        echo "present (defaults: $defaults); BeatsInputPeer sets maxStringLength 200000000 and maxNumberLength 10000 as Logstash does"
    else
        echo "absent (Jackson 2.15 added it): no limit on JSON string or number length"
    fi
}
{
    echo "logstash-input-beats: $(cat "$SRC/VERSION" 2>/dev/null || echo unknown)"
    echo "java: $("$JDK_BIN/java" -version 2>&1 | head -n1) ($("$JAVAC" -version 2>&1), --release 17)"
    echo "netty: $(jar_version netty-transport) (libnetty-java $(dpkg-query -W -f='${Version}' libnetty-java))"
    echo "jackson-core: $(jar_version jackson-core) (libjackson2-core-java $(dpkg-query -W -f='${Version}' libjackson2-core-java))"
    echo "jackson-databind: $(jar_version jackson-databind) (libjackson2-databind-java $(dpkg-query -W -f='${Version}' libjackson2-databind-java))"
    echo "jackson-annotations: $(jar_version jackson-annotations) (libjackson2-annotations-java $(dpkg-query -W -f='${Version}' libjackson2-annotations-java))"
    echo "log4j: $(jar_version log4j-core) (liblog4j2-java $(dpkg-query -W -f='${Version}' liblog4j2-java))"
    echo "jackson StreamReadConstraints: $(constraints)"
    echo "the plugin's own build.gradle: $(sed -n "s/^String \(jacksonVersion\|nettyVersion\) = '\(.*\)'/\1 \2/p" "$SRC/build.gradle" | paste -sd, -)"
} >"$OUT/versions.txt"
