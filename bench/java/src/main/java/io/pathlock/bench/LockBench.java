package io.pathlock.bench;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisFuture;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.async.RedisAsyncCommands;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.NestedMultiOutput;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;
import io.lettuce.core.resource.ClientResources;
import io.lettuce.core.resource.DefaultClientResources;
import io.pathlock.Lease;
import io.pathlock.PathLocks;
import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Lock;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceClientConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;
import org.springframework.data.redis.core.StringRedisTemplate;
import org.springframework.data.redis.core.script.DefaultRedisScript;
import org.springframework.integration.redis.util.RedisLockRegistry;

/**
 * {@code make bench-java}: lock plus release of one path, one after another on each of {@code
 * BENCH_THREADS} threads (default 1 and 8, each thread its own path), through the Java client
 * beside the same two commands on Lettuce alone ("raw commands", what the client adds is the
 * difference), Redisson's {@code RLock}, Spring Integration's {@code RedisLockRegistry} and the
 * users' Lua scripts ({@code bench/seed/}) called through {@code RedisTemplate} as their {@code
 * RedisLockUtils} calls them, with 0, 1,000, 10,000 and 100,000 other locks held by each
 * ({@code BENCH_SIZES}); and a folder move (two paths) beside a Redisson {@code MultiLock} of two
 * locks. All on one redis-server with the module ({@code REDIS_PORT}, as scripts/with-redis.sh
 * starts it). {@code BENCH_SYSTEMS} names a subset.
 *
 * <p>"Plain socket" sends the same two commands as "raw commands" over a blocking JDK socket of
 * its own per thread, with no client library and no thread hand-off: the most any client can do
 * on this machine when it sends a lock and then its release, one after the other, from one
 * thread. It bounds every ratio against the seed's script on one thread.
 *
 * <p>Side by side, in one run: at each size the systems take turns for {@code BENCH_SECONDS}
 * (default 15; at least {@code BENCH_TURNS}, default 5, turns), a batch of about 50 ms each per
 * turn (see {@link #turns}); the tables give each system's median rate over the turns, and each
 * ratio is the median of the turns' ratios.
 */
public final class LockBench {
    private static final String PATH = "/A/f.txt";
    private static final String SEED_HASH = "cs:lockedHashKey1";

    interface Op {
        void run(int thread) throws Exception;
    }

    record System(String name, Op op) {
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(env("REDIS_PORT", "6379"));
        List<Integer> sizes = Arrays.stream(env("BENCH_SIZES", "0,1000,10000,100000").split(","))
                .map(String::trim).map(Integer::parseInt).toList();
        int rounds = Integer.parseInt(env("BENCH_TURNS", "5"));
        double seconds = Double.parseDouble(env("BENCH_SECONDS", "15"));
        List<Integer> threadCounts = Arrays.stream(env("BENCH_THREADS", "1,8").split(","))
                .map(String::trim).map(Integer::parseInt).toList();
        List<String> only = Arrays.stream(env("BENCH_SYSTEMS", "").split(",")).map(String::trim)
                .filter(name -> !name.isEmpty()).toList();
        Path seed = Path.of(env("PATHLOCK_SEED_DIR", "bench/seed"));

        ClientResources resources = DefaultClientResources.create();
        RedisClient lettuce = RedisClient.create(resources, RedisURI.create("127.0.0.1", port));
        PathLocks pathlock = PathLocks.of(lettuce, "bench:pathlock");

        Config config = new Config();
        config.useSingleServer().setAddress("redis://127.0.0.1:" + port);
        RedissonClient redisson = Redisson.create(config);

        LettuceConnectionFactory factory = new LettuceConnectionFactory(new RedisStandaloneConfiguration("127.0.0.1", port),
                LettuceClientConfiguration.builder().clientResources(resources).build());
        factory.afterPropertiesSet();
        factory.start();
        RedisLockRegistry registry = new RedisLockRegistry(factory, "bench-registry");
        StringRedisTemplate template = new StringRedisTemplate(factory);
        template.afterPropertiesSet();
        DefaultRedisScript<Long> getLock = new DefaultRedisScript<>(Files.readString(seed.resolve("getFileLock.lua")), Long.class);
        DefaultRedisScript<Long> releaseLock = new DefaultRedisScript<>(Files.readString(seed.resolve("releaseFileLock.lua")), Long.class);

        // The same two commands the client sends, on Lettuce alone: what the client adds is the
        // difference (its token, note, watchdog timer, futures).
        StatefulRedisConnection<String, String> raw = lettuce.connect(StringCodec.UTF8);
        int maxThreads = threadCounts.stream().mapToInt(Integer::intValue).max().orElse(1);
        PlainSocket[] plain = new PlainSocket[maxThreads];
        for (int t = 0; t < maxThreads; t++) {
            plain[t] = new PlainSocket(port);
        }
        List<System> onePath = List.of(
                new System("plain socket", t -> {
                    String token = UUID.randomUUID().toString();
                    plain[t].call("PATHLOCK.ACQUIRE", "bench:pathlock", "TOKEN", token, "TTL", "30000", "NOTE",
                            "upload " + path(t), "WRITE", path(t));
                    plain[t].call("PATHLOCK.RELEASE", "bench:pathlock", token);
                }),
                new System("raw commands", t -> {
                    String token = UUID.randomUUID().toString();
                    raw.sync().dispatch(new Keyword("PATHLOCK.ACQUIRE"), new NestedMultiOutput<>(StringCodec.UTF8),
                            new CommandArgs<>(StringCodec.UTF8).addKey("bench:pathlock").add("TOKEN").add(token)
                                    .add("TTL").add(30_000).add("NOTE").add("upload " + path(t)).add("WRITE").add(path(t)));
                    raw.sync().dispatch(new Keyword("PATHLOCK.RELEASE"), new NestedMultiOutput<>(StringCodec.UTF8),
                            new CommandArgs<>(StringCodec.UTF8).addKey("bench:pathlock").add(token));
                }),
                new System("pathlock", t -> {
                    try (Lease lease = pathlock.upload(path(t))) {
                        touch(lease.fence());
                    }
                }),
                new System("RLock", t -> {
                    RLock lock = redisson.getLock("bench:rlock:" + path(t));
                    if (!lock.tryLock()) {
                        throw new IllegalStateException("RLock refused");
                    }
                    lock.unlock();
                }),
                new System("RedisLockRegistry", t -> {
                    Lock lock = registry.obtain(path(t));
                    if (!lock.tryLock()) {
                        throw new IllegalStateException("RedisLockRegistry refused");
                    }
                    lock.unlock();
                }),
                new System("seed script", t -> {
                    // As the users' RedisLockUtils: EVALSHA of each script through RedisTemplate.
                    String uuid = UUID.randomUUID().toString();
                    Long got = template.execute(getLock, List.of(path(t), SEED_HASH), uuid, "30",
                            String.valueOf(java.lang.System.currentTimeMillis()));
                    if (got == null || got != 1) {
                        throw new IllegalStateException("the seed script refused " + path(t));
                    }
                    template.execute(releaseLock, List.of(path(t), SEED_HASH), uuid);
                }));
        List<System> move = List.of(
                new System("pathlock move", t -> {
                    try (Lease lease = pathlock.move("/M" + t + "/C", "/N" + t)) {
                        touch(lease.fence());
                    }
                }),
                new System("MultiLock", t -> {
                    RLock lock = redisson.getMultiLock(redisson.getLock("bench:rlock:/M" + t + "/C"),
                            redisson.getLock("bench:rlock:/N" + t + "/C"));
                    if (!lock.tryLock()) {
                        throw new IllegalStateException("MultiLock refused");
                    }
                    lock.unlock();
                }));

        StatefulRedisConnection<String, String> admin = lettuce.connect(StringCodec.UTF8);
        admin.sync().flushall();
        String version = admin.sync().info("server").lines().filter(l -> l.startsWith("redis_version:"))
                .findFirst().orElse("redis_version:?").substring("redis_version:".length());
        java.lang.System.out.printf(Locale.ROOT, "redis %s, %d cores, load average %.1f; systems in turns for %.0f s (at least %d turns) per size; "
                + "Java %s, Lettuce %s, Redisson %s, Spring Integration %s%n", version,
                Runtime.getRuntime().availableProcessors(),
                java.lang.management.ManagementFactory.getOperatingSystemMXBean().getSystemLoadAverage(), seconds, rounds,
                java.lang.System.getProperty("java.version"),
                version(RedisClient.class), version(Redisson.class), version(RedisLockRegistry.class));

        List<System> all = new ArrayList<>(concat(onePath, move));
        if (!only.isEmpty()) {
            all.removeIf(system -> !only.contains(system.name()));
        }
        // Warming up: every system a while, so that the first size is not the JIT's.
        Map<Integer, ExecutorService> pools = new LinkedHashMap<>();
        for (int threads : threadCounts) {
            pools.put(threads, Executors.newFixedThreadPool(threads));
        }
        for (System system : all) {
            long until = java.lang.System.nanoTime() + (long) 1e9;
            while (java.lang.System.nanoTime() < until) {
                batch(system, pools.get(threadCounts.get(0)), threadCounts.get(0), 20);
            }
        }

        // size -> threads -> system -> each turn's rate
        Map<Integer, Map<Integer, Map<String, double[]>>> results = new LinkedHashMap<>();
        int held = 0;
        for (int size : sizes) {
            hold(admin.async(), held, size);
            held = size;
            Map<Integer, Map<String, double[]>> bySize = new LinkedHashMap<>();
            for (int threads : threadCounts) {
                Map<String, double[]> rates = turns(all, pools.get(threads), threads, seconds, rounds);
                bySize.put(threads, rates);
                java.lang.System.out.printf(Locale.ROOT, "held %,d, %d thread(s), %d turns: %s%n", size, threads,
                        rates.values().iterator().next().length, summary(rates));
            }
            results.put(size, bySize);
        }
        pools.values().forEach(ExecutorService::shutdown);

        for (int threads : threadCounts) {
            java.lang.System.out.println();
            java.lang.System.out.printf(Locale.ROOT, "Lock plus release of one path, operations per second, %d thread(s) per system "
                    + "(each its own path):%n%n", threads);
            java.lang.System.out.println("| locks held | plain socket | raw commands | pathlock | RLock | pathlock/RLock | "
                    + "RedisLockRegistry | pathlock/registry | seed script | pathlock/seed | plain socket/seed |");
            java.lang.System.out.println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
            for (var entry : results.entrySet()) {
                Map<String, double[]> r = entry.getValue().get(threads);
                java.lang.System.out.printf(Locale.ROOT, "| %,d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |%n",
                        entry.getKey(), rate(r.get("plain socket")), rate(r.get("raw commands")), rate(r.get("pathlock")),
                        rate(r.get("RLock")), ratio(r.get("pathlock"), r.get("RLock")), rate(r.get("RedisLockRegistry")),
                        ratio(r.get("pathlock"), r.get("RedisLockRegistry")), rate(r.get("seed script")),
                        ratio(r.get("pathlock"), r.get("seed script")), ratio(r.get("plain socket"), r.get("seed script")));
            }
            java.lang.System.out.println();
            java.lang.System.out.printf(Locale.ROOT, "A folder move (two paths), operations per second, %d thread(s):%n%n", threads);
            java.lang.System.out.println("| locks held | pathlock move | MultiLock of 2 RLocks | ratio |");
            java.lang.System.out.println("|---:|---:|---:|---:|");
            for (var entry : results.entrySet()) {
                Map<String, double[]> r = entry.getValue().get(threads);
                java.lang.System.out.printf(Locale.ROOT, "| %,d | %s | %s | %s |%n", entry.getKey(), rate(r.get("pathlock move")),
                        rate(r.get("MultiLock")), ratio(r.get("pathlock move"), r.get("MultiLock")));
            }
        }

        admin.close();
        for (PlainSocket socket : plain) {
            socket.close();
        }
        raw.close();
        pathlock.close();
        registry.destroy();
        factory.destroy();
        redisson.shutdown();
        lettuce.shutdown();
        resources.shutdown();
    }

    private static String path(int thread) {
        return thread == 0 ? PATH : "/A" + thread + "/f.txt";
    }

    private static final AtomicLong SINK = new AtomicLong();

    /** Keeps the JIT from dropping what an operation returned. */
    private static void touch(long value) {
        SINK.addAndGet(value);
    }

    /**
     * The systems in turns, batch by batch, for {@code seconds} (at least {@code minTurns} turns):
     * each turn runs a batch of every system, in an order that turns with it, each batch sized to
     * take about {@link #BATCH_MS}; a system's rate in a turn is its batch's operations over its
     * batch's time. Side by side this way, a ratio compares batches run moments apart, and a
     * machine that slows down for a while slows both sides of it.
     */
    static Map<String, double[]> turns(List<System> systems, ExecutorService pool, int threads, double seconds, int minTurns)
            throws Exception {
        Map<String, Integer> sizes = new LinkedHashMap<>();
        for (System system : systems) {
            // Calibrated on one operation per thread: a slow system's batch is one operation each.
            double perOp = 1 / batch(system, pool, threads, 1) * threads;
            sizes.put(system.name(), (int) Math.max(1, Math.min(10_000, BATCH_MS / 1e3 / perOp)));
        }
        Map<String, List<Double>> rates = new LinkedHashMap<>();
        systems.forEach(system -> rates.put(system.name(), new ArrayList<>()));
        long until = java.lang.System.nanoTime() + (long) (seconds * 1e9);
        for (int turn = 0; turn < minTurns || java.lang.System.nanoTime() < until; turn++) {
            for (int i = 0; i < systems.size(); i++) {
                System system = systems.get((i + turn) % systems.size());
                rates.get(system.name()).add(batch(system, pool, threads, sizes.get(system.name())));
            }
        }
        Map<String, double[]> out = new LinkedHashMap<>();
        rates.forEach((name, list) -> out.put(name, list.stream().mapToDouble(Double::doubleValue).toArray()));
        return out;
    }

    /** How long a batch takes, about. */
    static final double BATCH_MS = 50;

    /** Operations per second of {@code opsPerThread} operations on each of {@code threads} threads at once. */
    static double batch(System system, ExecutorService pool, int threads, int opsPerThread) throws Exception {
        List<Callable<Void>> work = new ArrayList<>(threads);
        for (int t = 0; t < threads; t++) {
            int thread = t;
            work.add(() -> {
                for (int i = 0; i < opsPerThread; i++) {
                    system.op().run(thread);
                }
                return null;
            });
        }
        long started = java.lang.System.nanoTime();
        for (Future<Void> done : pool.invokeAll(work)) {
            try {
                done.get();
            } catch (ExecutionException e) {
                throw new IllegalStateException(system.name() + " failed", e.getCause());
            }
        }
        return (double) threads * opsPerThread / ((java.lang.System.nanoTime() - started) / 1e9);
    }

    /**
     * One blocking connection of the JDK's own, speaking RESP by hand: a command is written in one
     * write and its whole reply read before the next, so a call costs one round trip and nothing
     * else (no event loop, no futures). Replies are read to their end and only errors looked at.
     */
    static final class PlainSocket implements AutoCloseable {
        private final Socket socket;
        private final OutputStream out;
        private final InputStream in;

        PlainSocket(int port) throws IOException {
            socket = new Socket("127.0.0.1", port);
            socket.setTcpNoDelay(true);
            out = socket.getOutputStream();
            in = new BufferedInputStream(socket.getInputStream());
        }

        void call(String... args) throws IOException {
            StringBuilder request = new StringBuilder().append('*').append(args.length).append("\r\n");
            for (String arg : args) {
                byte[] bytes = arg.getBytes(StandardCharsets.UTF_8);
                request.append('$').append(bytes.length).append("\r\n").append(arg).append("\r\n");
            }
            out.write(request.toString().getBytes(StandardCharsets.UTF_8));
            out.flush();
            skipReply();
        }

        /** Reads one reply to its end; an error reply throws, so that a refusal is not counted. */
        private void skipReply() throws IOException {
            int type = in.read();
            String line = line();
            switch (type) {
                case '*', '%', '~' -> {
                    long n = Long.parseLong(line) * (type == '%' ? 2 : 1);
                    for (long i = 0; i < n; i++) {
                        skipReply();
                    }
                }
                case '$' -> {
                    long n = Long.parseLong(line);
                    if (n >= 0) {
                        in.skipNBytes(n + 2);
                    }
                }
                case '-' -> throw new IllegalStateException("error reply: " + line);
                case -1 -> throw new IOException("connection closed");
                default -> {
                    // Simple strings, integers, nulls: the line was all of it.
                }
            }
        }

        private String line() throws IOException {
            StringBuilder line = new StringBuilder();
            for (int b = in.read(); b != '\r'; b = in.read()) {
                if (b < 0) {
                    throw new IOException("connection closed");
                }
                line.append((char) b);
            }
            in.read();
            return line.toString();
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }

    private record Keyword(String name) implements ProtocolKeyword {
        @Override
        public byte[] getBytes() {
            return name.getBytes(StandardCharsets.US_ASCII);
        }
    }

    /**
     * Makes each system hold {@code to} locks (it holds {@code from}): pathlock's in its project key
     * (one owner each), the seed's in its hash and path keys as its script writes them, Redisson's
     * and the registry's as keys of their own form; an hour long, none on the paths measured.
     */
    static void hold(RedisAsyncCommands<String, String> redis, int from, int to) {
        long now = java.lang.System.currentTimeMillis();
        List<RedisFuture<?>> pending = new ArrayList<>();
        for (int i = from; i < to; i++) {
            String path = "/held/" + i + "/x";
            pending.add(redis.dispatch(new Keyword("PATHLOCK.ACQUIRE"), new NestedMultiOutput<>(StringCodec.UTF8),
                    new CommandArgs<>(StringCodec.UTF8).addKey("bench:pathlock").add("TOKEN").add("held-" + i).add("TTL")
                            .add(3_600_000).add("WRITE").add(path)));
            pending.add(redis.hset(SEED_HASH, path, String.valueOf(now)));
            pending.add(redis.setex(path, 3600, UUID.randomUUID().toString()));
            pending.add(redis.hset("bench:rlock:held:" + i, UUID.randomUUID() + ":1", "1"));
            pending.add(redis.pexpire("bench:rlock:held:" + i, 3_600_000));
            pending.add(redis.psetex("bench-registry:held-" + i, 3_600_000, UUID.randomUUID().toString()));
            if (pending.size() >= 6_000) {
                await(pending);
            }
        }
        await(pending);
    }

    private static void await(List<RedisFuture<?>> pending) {
        for (RedisFuture<?> future : pending) {
            try {
                future.get(60, TimeUnit.SECONDS);
            } catch (Exception e) {
                throw new IllegalStateException("holding locks failed", e);
            }
        }
        pending.clear();
    }

    private static String summary(Map<String, double[]> rates) {
        StringBuilder out = new StringBuilder();
        rates.forEach((name, r) -> out.append(name).append(' ').append(rate(r)).append("/s; "));
        return out.toString();
    }

    static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }

    private static String rate(double[] rates) {
        if (rates == null) {
            return "-";
        }
        double m = median(rates);
        return m >= 100 ? String.format(Locale.ROOT, "%,.0f", m) : String.format(Locale.ROOT, "%.1f", m);
    }

    private static String ratio(double[] mine, double[] theirs) {
        if (mine == null || theirs == null) {
            return "-";
        }
        double[] ratios = new double[mine.length];
        for (int i = 0; i < mine.length; i++) {
            ratios[i] = mine[i] / theirs[i];
        }
        double m = median(ratios);
        return m >= 100 ? String.format(Locale.ROOT, "%,.0fx", m) : String.format(Locale.ROOT, "%.2fx", m);
    }

    private static List<System> concat(List<System> a, List<System> b) {
        List<System> all = new ArrayList<>(a);
        all.addAll(b);
        return all;
    }

    private static String version(Class<?> type) {
        String version = type.getPackage().getImplementationVersion();
        return version == null ? "?" : version;
    }

    private static String env(String name, String fallback) {
        String value = java.lang.System.getenv(name);
        return value == null || value.isEmpty() ? fallback : value;
    }

    private LockBench() {
    }
}
