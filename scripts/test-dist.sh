#!/usr/bin/env bash
# Installs each artifact of dist/ the way a user would, into a clean place, and uses it:
# `make test-dist` (part of `make test`), after `make dist`.
#
# 1. The Debian package: `dpkg -i` when run as root (as CI is) and PATHLOCK_DIST_DPKG is not 0
#    and no redis-pathlock is installed already, else unpacked with `dpkg-deb -x` into a scratch
#    root. lintian must find nothing at warning level or above. Then a stock redis-server (and each
#    Valkey of .deps/) loads the module from the packaged path through the packaged snippet, with
#    its loadmodule line in the server's own config file as the snippet says; CONFIG GET
#    pathlock.* must list exactly the snippet's settings, and a lock is granted, refused to a
#    conflicting request and released; a setting saved with CONFIG REWRITE survives a restart.
#    A dpkg install is purged at once, and nothing of it may be left; the servers keep the module
#    they loaded, and serve the clients below.
# 2. The wheel, then the sdist, each into a fresh virtualenv; examples/cloud_drive.py runs with it.
# 3. The npm tarball with `npm install --ignore-scripts` into an empty project, beside ioredis and
#    TypeScript; a TypeScript script is type-checked against the packaged declarations, compiled,
#    and takes, holds against another owner, and releases a lease.
# 4. The .crate, unpacked into a temporary folder with no path to this repository and built with
#    its own Cargo.lock; its example moves a folder under a lease.
# 5. The Java jar, its sources and javadoc jars and its pom, installed into a fresh local Maven
#    repository with the client README's command (plain Maven, Maven Central for Lettuce); a
#    newcomer's plain Maven project that depends on io.pathlock:pathlock-client compiles, and its
#    program holds a move against another owner, then takes the upload asynchronously.
# 6. The Go module's source archive, unpacked into a temporary folder; a fresh module requires it
#    by its path with a `replace` directive to that folder (as its README says), `go mod tidy`
#    resolves go-redis, and its program holds a move against another owner, then releases it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dist=$root/dist
work=$(mktemp -d)
package=redis-pathlock
redis_path=/usr/lib/redis/modules/libpathlock.so
valkey_path=/usr/lib/valkey/modules/libpathlock.so
prometheus_dir=/usr/share/$package/prometheus
ports=()
installed=""

say() { echo "test-dist: $*"; }
fail() { echo "test-dist: FAILED: $*" >&2; exit 1; }

cleanup() {
    local port
    for port in "${ports[@]}"; do redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; done
    [ -z "$installed" ] || dpkg --purge "$package" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

only() {
    local found=("$dist"/$1)
    [ ${#found[@]} -eq 1 ] && [ -e "${found[0]}" ] || fail "expected one dist/$1, found: ${found[*]}"
    echo "${found[0]}"
}

version_of() {
    cargo metadata --no-deps --format-version 1 --locked |
        python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == sys.argv[1]))' "$1"
}

# ---- 1. The Debian package -------------------------------------------------------------------
deb=$(only "${package}_*.deb")
version=$(version_of pathlock)-1
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "the package's version is not $version"
depends=$(dpkg-deb -f "$deb" Depends)
[[ "$depends" == *"libc6 (>= "* ]] || fail "Depends names no libc version: $depends"
say "$(basename "$deb"): Version $version, Depends: $depends"

if command -v lintian >/dev/null 2>&1; then
    # initial-upload-closes-no-bugs asks a package's first upload to Debian to close its ITP bug;
    # this package is not uploaded to Debian (docs/operations.md, Packages).
    lintian --fail-on error,warning --display-info --display-experimental --pedantic --suppress-tags initial-upload-closes-no-bugs \
        "$deb" 2>/dev/null || fail "lintian"
    say "lintian: nothing at warning level or above"
else
    fail "lintian is missing (scripts/deps.sh dist installs it)"
fi

if [ "$(id -u)" -eq 0 ] && [ "${PATHLOCK_DIST_DPKG:-1}" != 0 ] &&
    ! dpkg-query -W "$package" >/dev/null 2>&1; then
    # Two checkouts on one machine would install and purge the same package under each other.
    exec 9>/tmp/pathlock-test-dist.lock
    flock -w 600 9 || fail "another test-dist held the install lock for 10 minutes"
    for try in 1 2 3 4 5 6; do
        dpkg -i "$deb" >"$work/dpkg.log" 2>&1 && break
        # Another dpkg (an apt-get of scripts/deps.sh) may hold dpkg's lock for a while.
        grep -q 'lock' "$work/dpkg.log" && [ "$try" -lt 6 ] || { cat "$work/dpkg.log"; fail "dpkg -i"; }
        sleep 10
    done
    installed=1
    prefix=""
    say "installed with dpkg -i: $(dpkg-query -W -f '${Package} ${Version} ${Status}' "$package")"
else
    prefix=$work/root
    dpkg-deb -x "$deb" "$prefix"
    say "unpacked with dpkg-deb -x into a scratch root (not root, PATHLOCK_DIST_DPKG=0, or" \
        "$package already installed)"
fi
[ -f "$prefix$redis_path" ] || fail "$redis_path is not installed"
[ "$(readlink -f "$prefix$valkey_path")" = "$(readlink -f "$prefix$redis_path")" ] ||
    fail "$valkey_path does not lead to $redis_path"
for file in pathlock.lua grafana-dashboard.json; do
    cmp -s "$prefix$prometheus_dir/$file" "$root/packaging/prometheus/$file" ||
        fail "$prometheus_dir/$file is not packaging/prometheus/$file"
done

# Starts a server from the packaged snippet, the way its header says: the snippet's loadmodule
# line in the server's own config file, then the snippet included as it is. Sets `port`.
start_from_snippet() {
    local server=$1 snippet=$2 name=$3 dir module_line
    dir=$work/$name
    mkdir -p "$dir"
    module_line=$(sed -n "s|^# loadmodule /usr/lib/|loadmodule $prefix/usr/lib/|p" "$snippet")
    [ -n "$module_line" ] || fail "$snippet has no commented loadmodule line"
    cp "$snippet" "$dir/pathlock.conf"
    port=$(free_port)
    cat >"$dir/server.conf" <<EOF
port $port
bind 127.0.0.1
dir $dir
save ""
appendonly no
logfile $dir/server.log
daemonize yes
pidfile $dir/server.pid
$module_line
include $dir/pathlock.conf
EOF
    ports+=("$port")
    start_server "$server" "$dir/server.conf" "$port" "$name"
}

# Starts `server` with `conf`, daemonized, and waits until it answers on `port`.
start_server() {
    local server=$1 conf=$2 port=$3 name=$4
    "$server" "$conf" >/dev/null
    for _ in $(seq 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.05
    done
    redis-cli -p "$port" ping >/dev/null 2>&1 || { cat "$(dirname "$conf")/server.log" >&2; fail "$name did not start"; }
}

# A setting changed with CONFIG SET and saved with CONFIG REWRITE survives a restart: the rewrite
# writes a loadmodule line for every loaded module into the main file, which the snippet's
# layout (the line in the main file, not in the included snippet) leaves the only one.
check_rewrite() {
    local server=$1 port=$2 name=$3 conf lines
    conf=$work/$name/server.conf
    redis-cli -p "$port" CONFIG SET pathlock.max-note-bytes 300 >/dev/null
    [ "$(redis-cli -p "$port" CONFIG REWRITE)" = OK ] || fail "$name: CONFIG REWRITE"
    lines=$(grep -c '^loadmodule ' "$conf")
    [ "$lines" = 1 ] || fail "$name: CONFIG REWRITE left $lines loadmodule lines in $conf"
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    for _ in $(seq 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 || break
        sleep 0.05
    done
    start_server "$server" "$conf" "$port" "$name (restarted after CONFIG REWRITE)"
    [ "$(redis-cli -p "$port" CONFIG GET pathlock.max-note-bytes | tail -1)" = 300 ] ||
        fail "$name: pathlock.max-note-bytes did not survive CONFIG REWRITE and a restart"
    redis-cli -p "$port" CONFIG SET pathlock.max-note-bytes 256 >/dev/null
    say "$name: CONFIG REWRITE kept one loadmodule line, and the server started again with the setting"
}

# The module answers from the packaged path with the snippet's settings, and grants a lock.
check_server() {
    local port=$1 snippet=$2 module=$3 name=$4 got want token
    grep -qx "$prefix$module" <<<"$(redis-cli -p "$port" MODULE LIST)" ||
        fail "$name: the module was not loaded from $prefix$module"
    got=$(redis-cli -p "$port" CONFIG GET 'pathlock.*' | paste -d' ' - - | sort)
    want=$(grep '^pathlock\.' "$snippet" | sort)
    [ "$got" = "$want" ] || fail "$name: the snippet's settings differ from the module's:
$want
--- the module:
$got"
    token=$(redis-cli -p "$port" PATHLOCK.ACQUIRE proj:dist TTL 60000 WRITE /A/C | head -1)
    [ -n "$token" ] || fail "$name: no lock granted"
    [ -z "$(redis-cli -p "$port" PATHLOCK.ACQUIRE proj:dist WRITE /A/C/D/new.txt)" ] ||
        fail "$name: a conflicting lock was granted"
    [ "$(redis-cli -p "$port" PATHLOCK.RELEASE proj:dist "$token")" = 1 ] || fail "$name: release"
    # The packaged exporter script, as the exporter sends it: EVAL, every figure by name.
    redis-cli -p "$port" EVAL "$(cat "$prefix$prometheus_dir/pathlock.lua")" 0 | grep -qx pathlock_total_grants ||
        fail "$name: the packaged Prometheus script returned no pathlock_total_grants"
    say "$name: loaded $prefix$module with $(wc -l <<<"$want") settings at the snippet's values;" \
        "granted WRITE /A/C, refused WRITE /A/C/D/new.txt, released"
}

start_from_snippet redis-server "$prefix/etc/redis/pathlock.conf" redis
redis_port=$port
check_server "$redis_port" "$prefix/etc/redis/pathlock.conf" "$redis_path" "$(redis-server --version | cut -d' ' -f1-3)"
check_rewrite redis-server "$redis_port" redis
for valkey in "$root"/.deps/valkey-*/valkey-server; do
    [ -x "$valkey" ] || continue
    name=$(basename "$(dirname "$valkey")")
    start_from_snippet "$valkey" "$prefix/etc/valkey/pathlock.conf" "$name"
    check_server "$port" "$prefix/etc/valkey/pathlock.conf" "$valkey_path" "$("$valkey" --version | cut -d' ' -f1-3)"
    check_rewrite "$valkey" "$port" "$name"
done

if [ -n "$installed" ]; then
    dpkg --purge "$package" >/dev/null
    installed=""
    for path in "$redis_path" "$valkey_path" /etc/redis/pathlock.conf /etc/valkey/pathlock.conf \
        "/usr/share/doc/$package" "/usr/share/$package"; do
        [ ! -e "$path" ] && [ ! -L "$path" ] || fail "dpkg --purge left $path"
    done
    ! dpkg-query -W "$package" >/dev/null 2>&1 || fail "dpkg still knows $package after --purge"
    flock -u 9
    say "purged: no file of the package is left"
fi

# ---- 2. The Python client's wheel and sdist ----------------------------------------------------
py_version=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' clients/python/pyproject.toml)
wheel=$(only "pathlock-$py_version-py3-none-any.whl")
sdist=$(only "pathlock-$py_version.tar.gz")
python3 - "$wheel" <<'PY' || fail "the wheel is not pure Python"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/WHEEL"))
    text = wheel.read(meta).decode()
    assert "Root-Is-Purelib: true" in text and "Tag: py3-none-any" in text, text
    assert not [n for n in wheel.namelist() if n.endswith((".so", ".pyd"))]
PY
for artifact in "$wheel" "$sdist"; do
    venv=$work/venv-$(basename "$artifact")
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$artifact"
    # From an empty folder, so that only the installed package can be imported.
    (cd "$work" && "$venv/bin/python" - "$venv" "$py_version" <<'PY') || fail "$(basename "$artifact") installed wrong"
import importlib.metadata, pathlib, sys, pathlock
assert pathlib.Path(pathlock.__file__).resolve().is_relative_to(pathlib.Path(sys.argv[1]).resolve()), pathlock.__file__
assert importlib.metadata.version("pathlock") == sys.argv[2]
PY
    (cd "$work" && REDIS_PORT=$redis_port "$venv/bin/python" "$root/examples/cloud_drive.py" >"$work/example.log") ||
        { cat "$work/example.log"; fail "examples/cloud_drive.py with $(basename "$artifact")"; }
    say "$(basename "$artifact"): installed into a fresh virtualenv; examples/cloud_drive.py ran" \
        "($(wc -l <"$work/example.log") lines, exit 0)"
done

# ---- 3. The Node.js client's npm tarball -------------------------------------------------------
node_version=$(node -p 'require(process.argv[1]).version' "$root/clients/node/package.json")
tarball=$(only "pathlock-$node_version.tgz")
members=$(tar tzf "$tarball")
for member in package/dist/index.js package/dist/index.d.ts; do
    grep -qx "$member" <<<"$members" || fail "$(basename "$tarball") lacks $member"
done
# TypeScript and Node's types at the versions the client is built and tested with.
dev_tools=$(node -p 'const d = require(process.argv[1]).devDependencies; `typescript@${d.typescript} @types/node@${d["@types/node"]}`' "$root/clients/node/package.json")
project=$work/node-project
mkdir -p "$project"
(
    cd "$project" &&
    npm init -y >/dev/null &&
    npm install --ignore-scripts --no-audit --no-fund --loglevel=error "$tarball" ioredis $dev_tools >/dev/null &&
    [ ! -L node_modules/pathlock ] &&
    cat >take.ts <<'TS' &&
import { Redis } from "ioredis";
import { BusyError, PathLocks, type Lease } from "pathlock";

async function main(): Promise<void> {
  const redis = new Redis(Number(process.env.REDIS_PORT), "127.0.0.1");
  const alice = new PathLocks(redis, "proj:npm", { ttlMs: 30000 });
  const bob = new PathLocks(redis, "proj:npm");
  const lease: Lease = await alice.move("/A/C", "/B");
  const refused = await bob.upload("/A/C/D/new.txt").then(
    () => false,
    (error: unknown) => error instanceof BusyError && error.blockers[0].token === lease.token,
  );
  if (!refused) throw new Error("an upload into a folder being moved was not refused");
  await lease.release();
  const upload = await bob.upload("/A/C/D/new.txt");
  console.log(`move held with fence ${lease.fence}; upload granted after it, fence ${upload.fence}`);
  await upload.release();
  await alice.close();
  await bob.close();
  redis.disconnect();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
TS
    npx tsc --strict --target es2022 --module nodenext --skipLibCheck false take.ts &&
    REDIS_PORT=$redis_port node take.js
) >"$work/node.log" 2>&1 || { cat "$work/node.log"; fail "the npm tarball"; }
say "$(basename "$tarball"): npm install --ignore-scripts into an empty project; a TypeScript" \
    "script type-checked against its declarations and ran: $(tail -1 "$work/node.log")"

# ---- 4. The Rust client's .crate ---------------------------------------------------------------
crate_version=$(version_of pathlock-client)
crate=$(only "pathlock-client-$crate_version.crate")
mkdir -p "$work/crate"
tar xzf "$crate" -C "$work/crate"
(
    cd "$work/crate/pathlock-client-$crate_version" &&
    CARGO_TARGET_DIR=$work/crate/target cargo build --locked --quiet --example move_folder &&
    REDIS_URL=redis://127.0.0.1:$redis_port/ "$work/crate/target/debug/examples/move_folder"
) >"$work/crate.log" 2>&1 || { cat "$work/crate.log"; fail "the crate"; }
grep -q "moved /A/C into /B" "$work/crate.log" || { cat "$work/crate.log"; fail "the crate's example"; }
say "$(basename "$crate"): built alone in a temporary folder with its Cargo.lock; its example" \
    "ran: $(tail -1 "$work/crate.log")"

# ---- 5. The Java client's jars and pom ---------------------------------------------------------
java_version=$(python3 -c 'import sys, xml.etree.ElementTree as E; print(E.parse(sys.argv[1]).getroot().find("{http://maven.apache.org/POM/4.0.0}version").text)' clients/java/pom.xml)
[ "$java_version" = "$(version_of pathlock)" ] ||
    fail "clients/java/pom.xml's version $java_version is not Cargo.toml's $(version_of pathlock)"
jar=$(only "pathlock-client-$java_version.jar")
pom=$(only "pathlock-client-$java_version.pom")
sources=$(only "pathlock-client-$java_version-sources.jar")
javadoc=$(only "pathlock-client-$java_version-javadoc.jar")
# The Spring Boot starter's four files, with a pom that stands alone as the client's does (its
# tests, and the example application's on it, ran in make test-java).
starter_pom=$(only "pathlock-spring-boot-starter-$java_version.pom")
for part in "" -sources -javadoc; do only "pathlock-spring-boot-starter-$java_version$part.jar" >/dev/null; done
for checked in "$pom" "$starter_pom"; do
    ! grep -q '<parent>' "$checked" || fail "$(basename "$checked") names a parent, which a user would have to install too"
    for tag in name description url licenses scm developers; do
        grep -Eq "<$tag[ >]" "$checked" || fail "$(basename "$checked") has no <$tag>"
    done
done
m2=$work/m2
app=$work/java-app
# Plain Maven with its default settings (Maven Central), into a fresh local repository that has
# seen nothing of this checkout but the four files; the install command is the client README's.
mvn_fresh() {
    mvn -B -ntp -q -Dmaven.repo.local="$m2" "$@"
}
mkdir -p "$app/src/main/java/app"
(
    cd "$app" &&
    mvn_fresh org.apache.maven.plugins:maven-install-plugin:3.2.0:install-file -Dfile="$jar" -DpomFile="$pom" \
        -Dsources="$sources" -Djavadoc="$javadoc" &&
    cat >pom.xml <<EOF &&
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>app</groupId>
  <artifactId>app</artifactId>
  <version>1</version>
  <properties>
    <maven.compiler.source>17</maven.compiler.source>
    <maven.compiler.target>17</maven.compiler.target>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
    <dependency>
      <groupId>io.pathlock</groupId>
      <artifactId>pathlock-client</artifactId>
      <version>$java_version</version>
    </dependency>
  </dependencies>
</project>
EOF
    cat >src/main/java/app/Main.java <<'JAVA' &&
package app;

import io.lettuce.core.RedisClient;
import io.pathlock.Busy;
import io.pathlock.Lease;
import io.pathlock.PathLocks;
import java.time.Duration;

public class Main {
    public static void main(String[] args) throws Exception {
        RedisClient redis = RedisClient.create("redis://127.0.0.1:" + args[0]);
        try (PathLocks drive = PathLocks.of(redis, "proj:jar")) {
            PathLocks alice = drive.ttl(Duration.ofMillis(1500));
            PathLocks bob = drive.project("proj:jar");
            long fence;
            try (Lease move = alice.move("/A/C", "/B")) {
                fence = move.fence();
                Thread.sleep(2500);
                if (move.isLost()) {
                    throw new AssertionError("the watchdog did not keep the move's 1.5 s lease");
                }
                try (Lease upload = bob.upload("/A/C/D/new.txt")) {
                    throw new AssertionError("an upload into a folder being moved was granted");
                } catch (Busy busy) {
                    if (!busy.blockers().get(0).token().equals(move.token())) {
                        throw new AssertionError("blocked by the wrong owner: " + busy.blockers());
                    }
                }
            }
            Lease upload = bob.async().upload("/A/C/D/new.txt").join();
            System.out.println("move held 2.5 s with fence " + fence + "; upload granted after it, fence " + upload.fence());
            upload.releaseAsync().join();
        } finally {
            redis.shutdown();
        }
    }
}
JAVA
    mvn_fresh compile &&
    mvn_fresh org.apache.maven.plugins:maven-dependency-plugin:3.11.0:build-classpath -Dmdep.outputFile=classpath.txt
) >"$work/java-build.log" 2>&1 || { cat "$work/java-build.log"; fail "the Java jar"; }
# The program runs on what Maven resolved for the project: the jar, Lettuce and what it brings.
# (Its output is kept apart from Maven's, which writes terminal escapes even in batch mode.)
(cd "$app" && java -cp "target/classes:$(cat classpath.txt)" app.Main "$redis_port") \
    >"$work/java.log" 2>&1 || { cat "$work/java.log"; fail "the Java program"; }
grep -q "^move held 2.5 s" "$work/java.log" || { cat "$work/java.log"; fail "the Java program's output"; }
say "$(basename "$jar"): installed with its pom, sources and javadoc into a fresh Maven repository" \
    "by the README's command; a plain project that depends on it compiled and ran: $(grep '^move held' "$work/java.log")"

# ---- 6. The Go module's source archive ---------------------------------------------------------
go_version=$(version_of pathlock)
go_archive=$(only "pathlock-go-$go_version.tar.gz")
go_module=github.com/pathlock/pathlock/clients/go
mkdir -p "$work/go" "$work/go-app"
tar xzf "$go_archive" -C "$work/go"
[ "$(sed -n 's/^module //p' "$work/go/pathlock-go-$go_version/go.mod")" = "$go_module" ] ||
    fail "the archive's go.mod does not declare $go_module"
(
    cd "$work/go-app" &&
    printf 'module app\n\ngo 1.22\n\nrequire %s v%s\n\nreplace %s => ../go/pathlock-go-%s\n' \
        "$go_module" "$go_version" "$go_module" "$go_version" >go.mod &&
    cat >main.go <<'GO' &&
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pathlock/pathlock/clients/go"
)

func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + os.Args[1]})
	defer rdb.Close()
	alice, err := pathlock.New(rdb, "proj:go", pathlock.WithTTL(600*time.Millisecond))
	if err != nil {
		panic(err)
	}
	bob, _ := pathlock.New(rdb, "proj:go")
	move, err := alice.Move(ctx, "/A/C", "/B")
	if err != nil {
		panic(err)
	}
	time.Sleep(time.Second)
	if err := move.Err(); err != nil {
		panic(fmt.Sprint("the watchdog did not keep the move's 600 ms lease: ", err))
	}
	var busy *pathlock.BusyError
	if _, err := bob.Upload(ctx, "/A/C/D/new.txt"); !errors.As(err, &busy) || busy.Blockers[0].Token != move.Token() {
		panic(fmt.Sprint("an upload into a folder being moved was not refused by the move: ", err))
	}
	if err := move.Release(ctx); err != nil {
		panic(err)
	}
	upload, err := bob.Upload(ctx, "/A/C/D/new.txt")
	if err != nil {
		panic(err)
	}
	defer upload.Release(ctx)
	fmt.Printf("move held 1 s with fence %d; upload granted after it, fence %d\n", move.Fence(), upload.Fence())
}
GO
    GOFLAGS=-mod=mod GOWORK=off go mod tidy &&
    GOWORK=off go build -o app . &&
    ./app "$redis_port"
) >"$work/go.log" 2>&1 || { cat "$work/go.log"; fail "the Go module's archive"; }
grep -q "^move held 1 s" "$work/go.log" || { cat "$work/go.log"; fail "the Go program's output"; }
say "$(basename "$go_archive"): unpacked into a temporary folder; a fresh module that requires" \
    "$go_module with a replace directive to it built and ran: $(tail -1 "$work/go.log")"

say "6 passed, 0 failed"
