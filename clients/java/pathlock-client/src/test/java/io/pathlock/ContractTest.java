package io.pathlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.cluster.SlotHash;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import tools.jackson.databind.json.JsonMapper;

/**
 * The shared contract (clients/contract/): one dynamic test per scenario, run by the Java client
 * against real servers. clients/contract/README.md defines the steps; this runner follows the
 * shape of the Python one (clients/python/tests/test_contract.py).
 */
class ContractTest {
    private static final String CLIENT = "java";
    private static final Path CONTRACT = Path.of("../../contract").toAbsolutePath().normalize();
    private static final JsonMapper JSON = JsonMapper.builder().build();
    private static final Map<String, Object> SETTINGS = read(CONTRACT.resolve("contract.json"));
    private static final long SLACK_MS = number(SETTINGS.get("slack_ms")).longValue();
    private static final long TASK_TIMEOUT_MS = number(SETTINGS.get("task_timeout_ms")).longValue();
    private static final Map<String, Topology> LIVE = new HashMap<>();
    private static final ExecutorService TASKS = Executors.newCachedThreadPool(r -> {
        Thread thread = new Thread(r, "contract-task");
        thread.setDaemon(true);
        return thread;
    });

    @SuppressWarnings("unchecked")
    private static Map<String, Object> read(Path file) {
        try {
            return JSON.readValue(Files.readString(file), Map.class);
        } catch (IOException e) {
            throw new AssertionError("cannot read " + file + ": " + e, e);
        }
    }

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> scenarios() {
        List<Map<String, Object>> all = new ArrayList<>();
        try (Stream<Path> files = Files.list(CONTRACT.resolve("scenarios"))) {
            for (Path file : files.filter(f -> f.toString().endsWith(".json")).sorted().toList()) {
                all.addAll((List<Map<String, Object>>) read(file).get("scenarios"));
            }
        } catch (IOException e) {
            throw new AssertionError(e);
        }
        return all;
    }

    @AfterAll
    static void stopServers() {
        LIVE.values().forEach(Topology::close);
        LIVE.clear();
    }

    @TestFactory
    Stream<DynamicTest> everyScenario() {
        return scenarios().stream().map(scenario -> DynamicTest.dynamicTest((String) scenario.get("name"), () -> run(scenario)));
    }

    @Test
    void everyScenarioHasAKnownTopologyAndSteps() {
        List<Map<String, Object>> all = scenarios();
        assertTrue(all.size() >= 20, "scenarios: " + all.size());
        assertEquals(all.size(), all.stream().map(s -> s.get("name")).distinct().count(), "names are unique");
        for (Map<String, Object> scenario : all) {
            assertTrue(List.of("single", "replica", "cluster").contains(scenario.get("topology")), scenario.toString());
            for (Map<String, Object> step : steps(scenario)) {
                assertTrue(Run.STEPS.contains((String) step.get("do")), "unknown step " + step);
            }
        }
    }

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> steps(Map<String, Object> scenario) {
        return (List<Map<String, Object>>) scenario.get("steps");
    }

    @SuppressWarnings("unchecked")
    private static String except(Map<String, Object> where) {
        Map<String, Object> except = (Map<String, Object>) where.get("except");
        return except == null ? null : (String) except.get(CLIENT);
    }

    private static void run(Map<String, Object> scenario) {
        String skipped = except(scenario);
        Assumptions.assumeTrue(skipped == null, skipped);
        Topology topology = topology((String) scenario.get("topology"));
        Run run = new Run(scenario, topology);
        try {
            int number = 0;
            for (Map<String, Object> step : steps(scenario)) {
                number++;
                if (except(step) != null) {
                    continue;
                }
                try {
                    run.step(step);
                } catch (Throwable failure) {
                    throw new AssertionError("step " + number + " " + step + ": " + failure, failure);
                }
            }
        } finally {
            run.cleanUp();
        }
    }

    // The servers of each topology, shared by the scenarios, flushed before each, and started
    // again after a scenario stopped one.

    private static Topology topology(String name) {
        synchronized (LIVE) {
            Topology live = LIVE.get(name);
            if (live != null && live.stopped) {
                live.close();
                live = null;
            }
            if (live == null) {
                live = new Topology(name);
                LIVE.put(name, live);
            }
            live.flush();
            return live;
        }
    }

    static final class Topology {
        final String name;
        final List<Servers.Server> masters;
        final Servers.Server replica;
        final Servers.Cluster cluster;
        boolean stopped;

        Topology(String name) {
            this.name = name;
            switch (name) {
                case "cluster" -> {
                    cluster = Servers.Cluster.start();
                    masters = cluster.nodes();
                    replica = null;
                }
                case "replica" -> {
                    Servers.Replicated pair = Servers.Replicated.start();
                    masters = List.of(pair.master());
                    replica = pair.replica();
                    cluster = null;
                }
                default -> {
                    masters = List.of(Servers.Server.start());
                    replica = null;
                    cluster = null;
                }
            }
        }

        /** A new handle family on the topology's client: a RedisClient, or a RedisClusterClient. */
        PathLocks family() {
            return cluster != null ? cluster.connect() : masters.get(0).connect();
        }

        /** The server a command goes to: the replica, or the master (in a cluster, of the key's slot). */
        Servers.Server on(String where, String key) {
            if ("replica".equals(where)) {
                assertNotNull(replica, "this topology has no replica");
                return replica;
            }
            if (cluster == null || key == null) {
                return masters.get(0);
            }
            int slot = SlotHash.getSlot(key);
            for (Object entry : masters.get(0).command("CLUSTER", "SLOTS")) {
                List<Object> range = Admin.array(entry);
                if (Admin.integer(range.get(0)) <= slot && slot <= Admin.integer(range.get(1))) {
                    long port = Admin.integer(Admin.array(range.get(2)).get(1));
                    return masters.stream().filter(n -> n.port == port).findFirst().orElseThrow();
                }
            }
            throw new AssertionError("no node serves slot " + slot);
        }

        void flush() {
            for (Servers.Server master : masters) {
                master.command("FLUSHALL");
                master.command("CONFIG", "RESETSTAT");
            }
        }

        void stop(String which) {
            stopped = true;
            ("replica".equals(which) ? replica : masters.get(0)).kill();
        }

        void close() {
            if (cluster != null) {
                cluster.stop();
            } else {
                masters.forEach(Servers.Server::stop);
            }
            if (replica != null) {
                replica.stop();
            }
        }
    }

    // One scenario's run.

    /** A loss wait's outcome, as the scenarios write it. */
    record LossOutcome(String lost, boolean released) {
    }

    static final class Run {
        static final List<String> STEPS = List.of("handle", "acquire", "lock", "await", "pending", "release", "sleep",
                "mark", "held", "lost", "loss_wait", "redis", "stop", "server_locks", "inspect", "waiting", "calls");

        private final String key;
        private final Topology topology;
        private final PathLocks family;
        private final Map<String, PathLocks> handles = new HashMap<>();
        private final Map<String, Lease> leases = new LinkedHashMap<>();
        private final Map<String, Future<?>> tasks = new LinkedHashMap<>();
        private final Map<String, String> taskLeases = new HashMap<>();
        private final Map<String, Double> marks = new HashMap<>();

        Run(Map<String, Object> scenario, Topology topology) {
            this.key = (String) scenario.getOrDefault("key", "proj:contract");
            this.topology = topology;
            this.family = topology.family();
        }

        /** The value with its placeholders replaced. */
        @SuppressWarnings("unchecked")
        Object sub(Object value) {
            if (value instanceof List<?> list) {
                return list.stream().map(this::sub).toList();
            }
            if (value instanceof Map<?, ?> map) {
                Map<String, Object> out = new LinkedHashMap<>();
                ((Map<String, Object>) map).forEach((k, v) -> out.put(k, sub(v)));
                return out;
            }
            if (!(value instanceof String text)) {
                return value;
            }
            text = text.replace("{key}", key);
            for (Map.Entry<String, Lease> lease : leases.entrySet()) {
                text = text.replace("{token:" + lease.getKey() + "}", lease.getValue().token())
                        .replace("{fence:" + lease.getKey() + "}", String.valueOf(lease.getValue().fence()));
            }
            assertFalse(text.contains("{token:") || text.contains("{fence:"), "unknown lease in " + text);
            return text;
        }

        @SuppressWarnings("unchecked")
        private Map<String, Object> map(Object value) {
            return value == null ? Map.of() : (Map<String, Object>) sub(value);
        }

        @SuppressWarnings("unchecked")
        private static List<Object> list(Object value) {
            return (List<Object>) value;
        }

        void step(Map<String, Object> s) throws Exception {
            switch ((String) s.get("do")) {
                case "handle" -> handles.put((String) s.get("name"),
                        withDefaults(family.project((String) sub(s.getOrDefault("key", key))), map(s.get("options"))));
                case "acquire" -> runOrSpawn(s, acquire(s), (String) s.get("as"));
                case "lock" -> {
                    Lease lease = leases.get((String) s.get("lease"));
                    List<LockRequest> requests = requests(sub(s.get("requests")));
                    Map<String, Object> options = map(s.get("options"));
                    runOrSpawn(s, () -> lease.lock(requests, options(options)), null);
                }
                case "await" -> {
                    Future<?> task = tasks.get((String) s.get("task"));
                    Object value = null;
                    Throwable error = null;
                    try {
                        value = task.get(TASK_TIMEOUT_MS, TimeUnit.MILLISECONDS);
                    } catch (java.util.concurrent.ExecutionException e) {
                        error = Futures.unwrap(e);
                    }
                    check(value, error, s.get("expect"), taskLeases.get((String) s.get("task")));
                }
                case "pending" -> assertFalse(tasks.get((String) s.get("task")).isDone(), "task " + s.get("task") + " has finished");
                case "release" -> {
                    try {
                        leases.get((String) s.get("lease")).release();
                    } catch (RuntimeException e) {
                        if (!Boolean.TRUE.equals(s.get("may_fail"))) {
                            throw e;
                        }
                    }
                }
                case "sleep" -> Servers.sleep(number(s.get("ms")).longValue());
                case "mark" -> marks.put((String) s.get("name"), Servers.nowMs());
                case "held" -> {
                    Lease lease = leases.get((String) s.get("lease"));
                    assertFalse(lease.isLost(), "lost");
                    lease.throwIfLost();
                    if (s.containsKey("locks")) {
                        assertEquals(sub(s.get("locks")), pairs(lease.locks()));
                    }
                }
                case "lost" -> lost(s);
                case "loss_wait" -> {
                    Lease lease = leases.get((String) s.get("lease"));
                    CompletableFuture<LossOutcome> outcome = lease.lost().handle((lost, error) -> {
                        if (lost != null) {
                            return new LossOutcome(lost.reason().name().toLowerCase(java.util.Locale.ROOT), false);
                        }
                        assertInstanceOf(CancellationException.class, Futures.unwrap(error));
                        return new LossOutcome(null, true);
                    });
                    tasks.put((String) s.get("task"), outcome);
                }
                case "redis" -> {
                    List<Object> command = list(sub(s.get("command")));
                    String routing = command.size() > 1 ? String.valueOf(command.get(1)) : null;
                    Object reply = reply(topology.on((String) s.get("on"), routing).command(command.toArray()));
                    if (s.containsKey("reply")) {
                        assertEquals(normal(sub(s.get("reply"))), normal(reply), command + " answered " + reply);
                    }
                }
                case "stop" -> topology.stop((String) s.get("server"));
                case "server_locks" -> {
                    String lockKey = (String) sub(s.getOrDefault("key", key));
                    List<List<Object>> got = new ArrayList<>();
                    for (Object entry : topology.on((String) s.get("on"), lockKey).command("PATHLOCK.LOCKS", lockKey)) {
                        List<Object> fields = Admin.array(entry);
                        got.add(List.of(fields.get(1), fields.get(0), fields.get(2)));
                    }
                    List<List<Object>> want = new ArrayList<>();
                    for (Object triple : list(sub(s.get("locks")))) {
                        want.add(list(triple));
                    }
                    Comparator<List<Object>> order = Comparator.comparing(Object::toString);
                    got.sort(order);
                    want.sort(order);
                    assertEquals(want, got);
                }
                case "inspect" -> inspect(s);
                case "waiting" -> {
                    long count = number(s.get("count")).longValue();
                    Support.waitUntil(count + " waiting requests", TASK_TIMEOUT_MS,
                            () -> topology.on("master", key).command("PATHLOCK.WAITERS", key).size() >= count);
                }
                case "calls" -> {
                    String stats = topology.masters.get(0).info("commandstats");
                    Matcher m = Pattern.compile("cmdstat_" + Pattern.quote((String) s.get("command")) + ":calls=(\\d+)",
                            Pattern.CASE_INSENSITIVE).matcher(stats);
                    long calls = m.find() ? Long.parseLong(m.group(1)) : 0;
                    assertEquals(number(s.get("count")).longValue(), calls, "calls of " + s.get("command"));
                }
                default -> throw new AssertionError("unknown step " + s);
            }
        }

        /** A handle with the step's options as its defaults. */
        private static PathLocks withDefaults(PathLocks handle, Map<String, Object> options) {
            for (Map.Entry<String, Object> option : options.entrySet()) {
                handle = switch (option.getKey()) {
                    case "ttl_ms" -> handle.ttl(duration(option.getValue()));
                    case "wait_ms" -> handle.waitFor(duration(option.getValue()));
                    case "replicas" -> handle.replicas(number(option.getValue()).intValue());
                    case "replicas_timeout_ms" -> handle.replicasTimeout(duration(option.getValue()));
                    case "note" -> handle.note((String) option.getValue());
                    default -> throw new AssertionError("unknown option " + option);
                };
            }
            return handle;
        }

        /** The call's options; built when the call runs, so a refusal is the call's outcome. */
        private static AcquireOptions options(Map<String, Object> options) {
            AcquireOptions built = AcquireOptions.with();
            for (Map.Entry<String, Object> option : options.entrySet()) {
                built = switch (option.getKey()) {
                    case "ttl_ms" -> built.ttl(duration(option.getValue()));
                    case "wait_ms" -> built.waitFor(duration(option.getValue()));
                    case "replicas" -> built.replicas(number(option.getValue()).intValue());
                    case "replicas_timeout_ms" -> built.replicasTimeout(duration(option.getValue()));
                    case "note" -> built.note((String) option.getValue());
                    default -> throw new AssertionError("unknown option " + option);
                };
            }
            return built;
        }

        /**
         * Milliseconds as a Duration, a fraction kept to the nanosecond. "Infinity" has no
         * Duration: it becomes the longest one; "NaN" has none at all (its steps are excepted).
         */
        private static Duration duration(Object ms) {
            if ("Infinity".equals(ms)) {
                return Duration.ofSeconds(Long.MAX_VALUE);
            }
            if ("-Infinity".equals(ms)) {
                return Duration.ofSeconds(Long.MIN_VALUE);
            }
            double value = number(ms).doubleValue();
            return Duration.ofNanos(Math.round(value * 1_000_000));
        }

        private static List<LockRequest> requests(Object pairs) {
            List<LockRequest> requests = new ArrayList<>();
            for (Object pair : list(pairs)) {
                List<Object> p = list(pair);
                requests.add(new LockRequest(Mode.valueOf((String) p.get(0)), (String) p.get(1)));
            }
            return requests;
        }

        private static List<List<String>> pairs(List<LockRequest> locks) {
            return locks.stream().map(l -> List.of(l.mode().name(), l.path())).toList();
        }

        private Supplier<Object> acquire(Map<String, Object> s) {
            PathLocks handle = handles.get((String) s.get("handle"));
            List<Object> args = list(sub(s.get("args")));
            Map<String, Object> options = map(s.get("options"));
            String op = (String) s.get("op");
            return () -> {
                AcquireOptions given = options(options);
                return switch (op) {
                    case "upload" -> handle.upload((String) args.get(0), given);
                    case "create" -> handle.create((String) args.get(0), given);
                    case "read" -> handle.read((String) args.get(0), given);
                    case "delete" -> handle.delete((String) args.get(0), given);
                    case "rename" -> handle.rename((String) args.get(0), (String) args.get(1), given);
                    case "move" -> handle.move((String) args.get(0), (String) args.get(1), given);
                    case "copy" -> handle.copy((String) args.get(0), (String) args.get(1), given);
                    case "purge" -> handle.purge(args.stream().map(String.class::cast).toList(), given);
                    case "lock" -> handle.lock(requests(args), given);
                    default -> throw new AssertionError("unknown operation " + op);
                };
            };
        }

        private void runOrSpawn(Map<String, Object> s, Supplier<Object> call, String as) {
            if (s.containsKey("task")) {
                tasks.put((String) s.get("task"), CompletableFuture.supplyAsync(call, TASKS));
                taskLeases.put((String) s.get("task"), as);
                return;
            }
            Object value = null;
            Throwable error = null;
            try {
                value = call.get();
            } catch (RuntimeException e) {
                error = e;
            }
            check(value, error, s.get("expect"), as);
        }

        /** The outcome of a call against what the scenario expects of it. */
        private void check(Object value, Throwable error, Object expected, String as) {
            Map<String, Object> expect = map(expected);
            String kind = (String) expect.get("error");
            if (kind == null) {
                if (error != null) {
                    throw new AssertionError("expected success, got " + error, error);
                }
                if (value instanceof LossOutcome outcome) {
                    assertEquals(expect.get("lost"), outcome.lost(), "the loss wait's outcome");
                    assertEquals(Boolean.TRUE.equals(expect.get("released")), outcome.released(), "the loss wait's outcome");
                    return;
                }
                if (as != null) {
                    leases.put(as, (Lease) value);
                }
                long fence = value instanceof Lease lease ? lease.fence() : (Long) value;
                if (expect.containsKey("fence_above")) {
                    assertTrue(fence > leases.get((String) expect.get("fence_above")).fence(), "fence " + fence);
                }
                if (expect.containsKey("locks")) {
                    assertEquals(expect.get("locks"), pairs(((Lease) value).locks()));
                }
                if (expect.containsKey("ttl_ms")) {
                    assertEquals(number(expect.get("ttl_ms")).longValue(), ((Lease) value).ttl().toMillis());
                }
                if (expect.containsKey("note")) {
                    assertEquals(expect.get("note"), ((Lease) value).note());
                }
                return;
            }
            Class<? extends Throwable> type = switch (kind) {
                case "invalid" -> IllegalArgumentException.class;
                case "busy" -> Busy.class;
                case "lost" -> LeaseLost.class;
                case "not_replicated" -> NotReplicated.class;
                case "wrong_type" -> WrongType.class;
                default -> throw new AssertionError("unknown error kind " + kind);
            };
            assertInstanceOf(type, error, "expected " + kind + ", got " + error + " / " + value);
            String message = error.getMessage();
            for (Object piece : list(expect.getOrDefault("contains", List.of()))) {
                assertTrue(message.contains((String) piece), "\"" + piece + "\" not in \"" + message + "\"");
            }
            if (expect.containsKey("message")) {
                assertTrue(matches((String) expect.get("message"), message), "message \"" + message + "\"");
            }
            if (expect.containsKey("blockers")) {
                List<HeldLock> got = ((Busy) error).blockers();
                List<Object> want = list(expect.get("blockers"));
                assertEquals(want.size(), got.size(), "blockers " + got);
                for (int i = 0; i < want.size(); i++) {
                    assertEntry(want.get(i), got.get(i));
                }
            }
            if (expect.containsKey("reason")) {
                assertEquals(expect.get("reason"), ((LeaseLost) error).reason().name().toLowerCase(java.util.Locale.ROOT));
            }
        }

        @SuppressWarnings("unchecked")
        private static void assertEntry(Object expected, Object got) {
            for (Map.Entry<String, Object> field : ((Map<String, Object>) expected).entrySet()) {
                Object want = field.getValue();
                boolean ok = switch (field.getKey()) {
                    case "ttl_ms_at_most" -> {
                        long ttl = ((HeldLock) got).ttlMs();
                        yield 0 < ttl && ttl <= number(want).longValue();
                    }
                    case "fence" -> ((HeldLock) got).fence() == Long.parseLong(String.valueOf(want));
                    case "path" -> Objects.equals(want, ((HeldLock) got).path());
                    case "mode" -> Objects.equals(want, ((HeldLock) got).mode().name());
                    case "token" -> Objects.equals(want, got instanceof Waiter w ? w.token() : ((HeldLock) got).token());
                    case "note" -> Objects.equals(want, got instanceof Waiter w ? w.note() : ((HeldLock) got).note());
                    case "locks" -> Objects.equals(want, pairs(((Waiter) got).requests()));
                    default -> throw new AssertionError("unknown field " + field);
                };
                assertTrue(ok, got + " is not " + expected);
            }
        }

        private void lost(Map<String, Object> s) throws Exception {
            Lease lease = leases.get((String) s.get("lease"));
            double since = s.containsKey("since") ? marks.get((String) s.get("since")) : Servers.nowMs();
            double limit = s.containsKey("within_ms") ? number(s.get("within_ms")).doubleValue() + SLACK_MS : TASK_TIMEOUT_MS;
            LeaseLost lost;
            try {
                lost = lease.lost().get((long) Math.max(0, since + limit - Servers.nowMs()), TimeUnit.MILLISECONDS);
            } catch (TimeoutException e) {
                throw new AssertionError("not reported lost within " + limit + " ms");
            }
            double took = Servers.nowMs() - since;
            assertTrue(took <= limit + 50, "reported lost after " + took + " ms, limit " + limit + " ms");
            if (s.containsKey("at_least_ms")) {
                assertTrue(took >= number(s.get("at_least_ms")).doubleValue(), "reported lost after only " + took + " ms");
            }
            assertTrue(lease.isLost());
            assertEquals(s.get("reason"), lost.reason().name().toLowerCase(java.util.Locale.ROOT));
            LeaseLost thrown = assertThrows(LeaseLost.class, lease::throwIfLost);
            Map<String, Object> expect = new LinkedHashMap<>(Map.of("error", "lost", "reason", s.get("reason")));
            if (s.containsKey("message")) {
                expect.put("message", s.get("message"));
            }
            check(null, thrown, expect, null);
        }

        private void inspect(Map<String, Object> s) {
            PathLocks handle = handles.get((String) s.get("handle"));
            String token = (String) sub(s.get("token"));
            String path = (String) sub(s.get("path"));
            Supplier<Object> call = switch ((String) s.get("call")) {
                case "locks" -> () -> handle.locks(path, token);
                case "check" -> {
                    List<LockRequest> requests = requests(sub(s.get("requests")));
                    yield () -> handle.check(requests, token);
                }
                case "waiters" -> () -> handle.waiters(path);
                default -> throw new AssertionError("unknown call " + s.get("call"));
            };
            Object expect = sub(s.get("expect"));
            if (expect instanceof Map<?, ?>) {
                Object value = null;
                Throwable error = null;
                try {
                    value = call.get();
                } catch (RuntimeException e) {
                    error = e;
                }
                check(value, error, expect, null);
                return;
            }
            List<?> got = (List<?>) call.get();
            List<Object> want = list(expect);
            assertEquals(want.size(), got.size(), s.get("call") + " answered " + got);
            for (int i = 0; i < want.size(); i++) {
                assertEntry(want.get(i), got.get(i));
            }
        }

        /** An admin reply as the scenarios write it: a scalar reply is the one value of the list. */
        private static Object reply(List<Object> reply) {
            return reply.size() == 1 && !(reply.get(0) instanceof List<?>) ? reply.get(0) : reply;
        }

        /** Numbers as longs, so that JSON's 1 and a reply's 1L compare equal. */
        private static Object normal(Object value) {
            if (value instanceof Number n) {
                return n.longValue();
            }
            if (value instanceof List<?> list) {
                return list.stream().map(Run::normal).toList();
            }
            return value;
        }

        /** Releases what the scenario still holds, its tasks' grants among it. */
        void cleanUp() {
            for (Map.Entry<String, Future<?>> task : tasks.entrySet()) {
                try {
                    Object value = task.getValue().get(TASK_TIMEOUT_MS, TimeUnit.MILLISECONDS);
                    if (value instanceof Lease lease) {
                        leases.putIfAbsent("task " + task.getKey(), lease);
                    }
                } catch (Exception e) {
                    // What failed holds nothing.
                }
            }
            for (Lease lease : leases.values()) {
                try {
                    lease.release();
                } catch (RuntimeException e) {
                    // The server may be gone; the locks expire anyway.
                }
            }
            family.close();
        }
    }

    private static Number number(Object value) {
        if (value instanceof Number n) {
            return n;
        }
        if ("NaN".equals(value)) {
            throw new AssertionError("NaN has no Duration or int in Java: the step should be excepted for java");
        }
        return Double.parseDouble(String.valueOf(value));
    }

    /** Whether {@code message} is {@code pattern}, each {@code {n}} in it standing for one or more digits. */
    static boolean matches(String pattern, String message) {
        String[] pieces = pattern.split("\\{n\\}", -1);
        if (!message.startsWith(pieces[0])) {
            return false;
        }
        int at = pieces[0].length();
        for (int i = 1; i < pieces.length; i++) {
            int digits = at;
            while (digits < message.length() && Character.isDigit(message.charAt(digits))) {
                digits++;
            }
            if (digits == at || !message.startsWith(pieces[i], digits)) {
                return false;
            }
            at = digits + pieces[i].length();
        }
        return at == message.length();
    }
}
