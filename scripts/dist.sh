#!/usr/bin/env bash
# Builds what a user installs without a Rust toolchain into dist/ (git-ignored): `make dist`.
#
#   scripts/dist.sh [deb] [python] [node] [rust] [java] [go]     (all six when none is named)
#
#   deb     redis-pathlock_<version>-1_<arch>.deb: the release module, from target/release
#           (`make dist` builds it first), staged and packed with dpkg-deb
#   python  pathlock-<version>-py3-none-any.whl and pathlock-<version>.tar.gz (python -m build,
#           in .venv-dist, the wheel built from the sdist)
#   node    pathlock-<version>.tgz (npm pack: dist/*.js and *.d.ts inside, no install script)
#   rust    pathlock-client-<version>.crate (cargo package; `make test-dist` builds it alone)
#   java    pathlock-client-<version>.jar, -sources.jar, -javadoc.jar and .pom, and the same four of
#           pathlock-spring-boot-starter (Maven, from Maven Central; the poms flattened, so they
#           need no parent installed beside them)
#   go      pathlock-go-<version>.tar.gz: the Go module's source (clients/go without its bench
#           module), for a `replace` directive until the module is fetched by its path
#
# The Debian package is made with dpkg-deb from a staged tree rather than cargo-deb: dpkg-deb
# (dpkg) and dpkg-shlibdeps (dpkg-dev) are Debian's own tools and already on a Debian build host,
# while cargo-deb is one more program to build from crates.io; and the package needs nothing
# cargo-deb adds (no maintainer scripts, no systemd unit, one library and two conffiles).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/dist
mkdir -p "$out"

# The package's name, and where it puts things. Neither Redis nor Valkey looks in a modules
# folder by itself: a server loads what a `loadmodule` line names. /usr/lib/redis/modules is where
# Redis's module packages and images put modules, /usr/lib/valkey/modules Valkey's; Debian's
# redis-server and valkey-server units forbid executing anything outside /usr/bin/<server>,
# /usr/lib and /lib (NoExecPaths=/, ExecPaths=...), and both folders are under /usr/lib.
package=redis-pathlock
redis_path=/usr/lib/redis/modules/libpathlock.so
valkey_path=/usr/lib/valkey/modules/libpathlock.so
prometheus_dir=/usr/share/$package/prometheus

# A field of `cargo metadata` for one package of the workspace.
crate_version() {
    cargo metadata --no-deps --format-version 1 --locked |
        python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == sys.argv[1]))' "$1"
}

# The config snippet for one server: every pathlock.* setting at its default and the comments
# that go with them, taken from redis.conf.example below its loadmodule line (the lines that the
# observability test holds to the module's defaults), under a header that says how to use it.
snippet() {
    local server=$1 conf=$2 module=$3 service=$4 name=$5
    cat <<EOF
# pathlock's settings for $name, from the $package package. They take effect once the server
# loads the module and reads this file:
#   1. put the loadmodule line below, without its '#', in $conf;
#   2. add this line to $conf after it:  include /etc/$server/pathlock.conf
#   3. restart the server:  systemctl restart $service
# Keep the loadmodule line in $conf itself, not here: CONFIG REWRITE writes one into $conf for
# every loaded module, and a second one here would stop the next start.
# A server that reads pathlock.* settings without loading the module refuses to start.
# loadmodule $module
EOF
    sed -n '/^loadmodule /,$p' redis.conf.example | tail -n +2
}

build_deb() {
    local upstream version arch maintainer stage so deb date commit
    upstream=$(crate_version pathlock)
    version=$upstream-1
    arch=$(dpkg --print-architecture)
    so=$root/target/release/libpathlock.so
    [ -f "$so" ] || { echo "pathlock: $so is missing; run make build (make dist does)" >&2; exit 1; }
    # Whoever made the commit the package is built from, unless DEB_MAINTAINER names someone.
    maintainer=${DEB_MAINTAINER:-$(git log -1 --format='%an <%ae>' 2>/dev/null || true)}
    [ -n "$maintainer" ] || { echo "pathlock: set DEB_MAINTAINER='Name <address>'" >&2; exit 1; }
    commit=$(git describe --always --dirty 2>/dev/null || echo "unknown commit")
    # The changelog's date, and with it the files' times, are the commit's, so that building the
    # same commit twice gives the same package.
    export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
    date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")

    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    # Staged where dpkg-shlibdeps expects a package's files: debian/<package>/, with DEBIAN/.
    stage=$work/debian/$package
    mkdir -p "$stage/DEBIAN"
    # Executable, unlike a plain shared library: Redis 7.0 refuses to load a module file that has
    # no execute bit ("It does not have execute permissions").
    install -D -m 0755 "$so" "$stage$redis_path"
    # Debug information stays in target/release; the package ships the stripped library.
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$stage$redis_path"
    mkdir -p "$stage$(dirname "$valkey_path")"
    ln -s ../../redis/modules/libpathlock.so "$stage$valkey_path"
    snippet redis /etc/redis/redis.conf "$redis_path" redis-server Redis >"$work/redis.conf"
    snippet valkey /etc/valkey/valkey.conf "$valkey_path" valkey-server Valkey >"$work/valkey.conf"
    install -D -m 0644 "$work/redis.conf" "$stage/etc/redis/pathlock.conf"
    install -D -m 0644 "$work/valkey.conf" "$stage/etc/valkey/pathlock.conf"
    # The Prometheus exporter's script and the Grafana dashboard (docs/operations.md), where the
    # exporter's --script can name them as they are: data the package ships, not examples.
    install -D -m 0644 "$root/packaging/prometheus/pathlock.lua" "$stage$prometheus_dir/pathlock.lua"
    install -D -m 0644 "$root/packaging/prometheus/grafana-dashboard.json" "$stage$prometheus_dir/grafana-dashboard.json"

    local doc=$stage/usr/share/doc/$package
    mkdir -p "$doc"
    python3 packaging/deb/copyright.py "$maintainer" >"$doc/copyright"
    cat >"$work/changelog" <<EOF
$package ($version) unstable; urgency=medium

  * pathlock $upstream, built from commit $commit.

 -- $maintainer  $date
EOF
    gzip -9n <"$work/changelog" >"$doc/changelog.Debian.gz"
    chmod 0644 "$doc"/*

    # Depends: the libc (and libgcc_s, for unwinding) versions the library's symbols need, as
    # Debian's symbols files tell dpkg-shlibdeps; it reads the package list of debian/control.
    printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$package" "$package" >"$work/debian/control"
    local depends
    depends=$(cd "$work" && dpkg-shlibdeps -O "-edebian/$package$redis_path" | sed -n 's/^shlibs:Depends=//p')
    [ -n "$depends" ] || { echo "pathlock: dpkg-shlibdeps found no dependency" >&2; exit 1; }

    find "$stage" -type d -exec chmod 0755 {} +
    printf '/etc/redis/pathlock.conf\n/etc/valkey/pathlock.conf\n' >"$stage/DEBIAN/conffiles"
    (cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort |
        xargs md5sum) >"$stage/DEBIAN/md5sums"
    cat >"$stage/DEBIAN/control" <<EOF
Package: $package
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $depends
Enhances: redis-server, valkey-server
Section: database
Priority: optional
Description: hierarchical path locks for Redis and Valkey (server module)
 pathlock is a module for Redis 7.0 or newer and Valkey 8.1 or newer that
 keeps each project's locks in a prefix tree, so that a lock on a folder
 conflicts with locks under it and above it, and each command costs
 O(path depth) whatever the number of locks held.
 .
 This package installs the module in $(dirname "$redis_path"), links it
 from $(dirname "$valkey_path"), and puts a config snippet with every
 pathlock.* setting at its default in /etc/redis/pathlock.conf and
 /etc/valkey/pathlock.conf. The server loads nothing until its
 configuration says so: see the top of the snippet. The script for the
 Prometheus redis_exporter's --script option and a Grafana dashboard
 are in $prometheus_dir.
EOF
    chmod 0644 "$stage/DEBIAN/"*
    deb=$out/${package}_${version}_$arch.deb
    dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
    echo "$deb"
}

# python -m build in a virtualenv of its own (.venv-dist), so the system Python is left alone;
# it builds the sdist, then the wheel from the sdist, which proves the sdist is complete.
build_python() {
    local venv=$root/.venv-dist
    test -x "$venv/bin/python" || python3 -m venv "$venv"
    "$venv/bin/python" -c 'import build' 2>/dev/null ||
        "$venv/bin/pip" install --quiet --disable-pip-version-check build
    rm -rf clients/python/build clients/python/src/*.egg-info
    "$venv/bin/python" -m build --outdir "$out" clients/python >"$out/.python-build.log" 2>&1 ||
        { cat "$out/.python-build.log" >&2; exit 1; }
    rm "$out/.python-build.log"
    ls "$out"/pathlock-*.whl "$out"/pathlock-*.tar.gz
}

# npm pack runs the package's prepack script (tsc), so the tarball holds dist/ as compiled now;
# the old dist/ goes first so that nothing of a removed source is packed.
build_node() {
    (cd clients/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null && rm -rf dist &&
        npm pack --silent --pack-destination "$out" >/dev/null)
    ls "$out"/pathlock-*.tgz
}

# Verified by `make test-dist`, which builds the crate from the .crate alone outside the
# repository; --no-verify here saves building it twice.
build_rust() {
    # --allow-dirty: a checkout with uncommitted changes packs them, as the other artifacts do.
    cargo package --locked --no-verify --allow-dirty -p pathlock-client --quiet
    local crate=pathlock-client-$(crate_version pathlock-client).crate
    cp "target/package/$crate" "$out/$crate"
    echo "$out/$crate"
}

# The version in clients/java/pom.xml (the project's own, not a dependency's or a plugin's).
java_version() {
    python3 -c 'import sys, xml.etree.ElementTree as E; print(E.parse(sys.argv[1]).getroot().find("{http://maven.apache.org/POM/4.0.0}version").text)' clients/java/pom.xml
}

# The Java client as a Maven repository publishes it: the jar, its sources and javadoc jars, and
# its pom (flattened by the build: it names Lettuce and no parent), built as `make test-java`
# builds them, tests skipped (they ran there). `make test-dist` installs them into a fresh local
# repository as the client's README says.
build_java() {
    local version module artifact
    version=$(java_version)
    (cd clients/java && mvn -B -ntp -q package -DskipTests)
    # The client and the Spring Boot starter (the example application in the same build is not published).
    for module in pathlock-client pathlock-spring-boot-starter; do
        for artifact in "$module-$version.jar" "$module-$version-sources.jar" "$module-$version-javadoc.jar" \
            "$module-$version.pom"; do
            cp "clients/java/$module/target/$artifact" "$out/"
            ls "$out/$artifact"
        done
    done
}

# The Go client's module as source, under pathlock-go-<version>/ (Go takes a module by its path,
# from a proxy or a version control host, or from a folder a `replace` directive names: this is
# for the last). Its files are those git knows or would add (a checkout's uncommitted changes are
# packed, as the other artifacts pack them), without bench/, a module of its own; names, times and
# owners are fixed so that one commit gives one archive.
build_go() {
    local version name
    version=$(crate_version pathlock)
    name=pathlock-go-$version
    (cd clients/go && git ls-files -co --exclude-standard . | grep -v '^bench/' | LC_ALL=C sort) |
        tar -C clients/go -czf "$out/$name.tar.gz" --transform "s|^|$name/|" --owner=0 --group=0 \
            --numeric-owner --mtime="@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}" \
            --no-recursion -T -
    echo "$out/$name.tar.gz"
}

# A full build starts from an empty dist/, so that no artifact of an older version is left beside.
[ $# -gt 0 ] || { rm -rf "$out"; mkdir -p "$out"; set -- deb python node rust java go; }
for what in "$@"; do
    case "$what" in
    deb) build_deb ;;
    python) build_python ;;
    node) build_node ;;
    rust) build_rust ;;
    java) build_java ;;
    go) build_go ;;
    *) echo "usage: $0 [deb] [python] [node] [rust] [java] [go]" >&2; exit 2 ;;
    esac
done
