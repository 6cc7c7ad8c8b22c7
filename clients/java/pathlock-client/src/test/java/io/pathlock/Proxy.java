package io.pathlock;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

/**
 * A TCP proxy on a free loopback port in front of a real server. {@code dropReplies = n} makes
 * the next n chunks of replies vanish along with the connection (the server did the work, the
 * client never hears of it); {@code replyDelayMs} and {@code requestDelayMs} hold every chunk back
 * for that long, in order; {@code onRequest} sees each chunk of requests as it arrives. It records
 * the PATHLOCK commands it forwards, in order.
 */
final class Proxy implements AutoCloseable {
    final AtomicInteger dropReplies = new AtomicInteger();
    volatile long replyDelayMs;
    volatile long requestDelayMs;
    volatile Consumer<String> onRequest = chunk -> { };
    final List<String> seen = new ArrayList<>();

    private final int target;
    private final ServerSocket listener;
    private final Set<Socket> sockets = ConcurrentHashMap.newKeySet();
    private final ScheduledExecutorService delays = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread thread = new Thread(r, "proxy-delay");
        thread.setDaemon(true);
        return thread;
    });

    Proxy(int target) throws IOException {
        this.target = target;
        this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread accept = new Thread(this::accept, "proxy-accept");
        accept.setDaemon(true);
        accept.start();
    }

    int port() {
        return listener.getLocalPort();
    }

    List<String> seen() {
        synchronized (seen) {
            return List.copyOf(seen);
        }
    }

    private void accept() {
        while (true) {
            Socket downstream;
            try {
                downstream = listener.accept();
            } catch (IOException e) {
                return;
            }
            try {
                Socket upstream = new Socket(InetAddress.getLoopbackAddress(), target);
                sockets.add(downstream);
                sockets.add(upstream);
                pump(downstream, upstream, true);
                pump(upstream, downstream, false);
            } catch (IOException e) {
                close(downstream);
            }
        }
    }

    private void pump(Socket from, Socket to, boolean requests) {
        Thread thread = new Thread(() -> {
            byte[] buffer = new byte[65536];
            try (InputStream in = from.getInputStream()) {
                OutputStream out = to.getOutputStream();
                while (true) {
                    int n = in.read(buffer);
                    if (n < 0) {
                        break;
                    }
                    byte[] chunk = java.util.Arrays.copyOf(buffer, n);
                    if (requests) {
                        String text = new String(chunk, StandardCharsets.ISO_8859_1);
                        record(text);
                        onRequest.accept(text);
                    } else if (dropReplies.get() > 0 && dropReplies.getAndDecrement() > 0) {
                        break;
                    }
                    long delay = requests ? requestDelayMs : replyDelayMs;
                    if (delay > 0) {
                        // One scheduled write per chunk, each due no earlier than the one before.
                        delays.schedule(() -> write(out, chunk, from, to), delay, TimeUnit.MILLISECONDS);
                    } else {
                        out.write(chunk);
                        out.flush();
                    }
                }
            } catch (IOException e) {
                // The other side closed.
            }
            close(from);
            close(to);
        }, requests ? "proxy-requests" : "proxy-replies");
        thread.setDaemon(true);
        thread.start();
    }

    private void record(String text) {
        String upper = text.toUpperCase();
        synchronized (seen) {
            int at = 0;
            while ((at = upper.indexOf("PATHLOCK.", at)) >= 0) {
                int end = at;
                while (end < upper.length() && upper.charAt(end) > ' ') {
                    end++;
                }
                seen.add(upper.substring(at, end));
                at = end;
            }
        }
    }

    private static void write(OutputStream out, byte[] chunk, Socket from, Socket to) {
        try {
            synchronized (out) {
                out.write(chunk);
                out.flush();
            }
        } catch (IOException e) {
            close(from);
            close(to);
        }
    }

    private static void close(Socket socket) {
        try {
            socket.close();
        } catch (IOException e) {
            // Already closed.
        }
    }

    @Override
    public void close() {
        try {
            listener.close();
        } catch (IOException e) {
            // Already closed.
        }
        sockets.forEach(Proxy::close);
        delays.shutdownNow();
    }
}
