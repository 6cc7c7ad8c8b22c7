package io.pathlock;

import java.net.InetSocketAddress;

/** A server's host and port, as given by the user or by a cluster's redirect. */
record Address(String host, int port) {
    /** {@code host:port}, the form of {@code -MOVED} and {@code CLUSTER SLOTS}; IPv6 hosts end at the last colon. */
    static Address parse(String hostPort, String defaultHost) {
        int colon = hostPort.lastIndexOf(':');
        if (colon < 0) {
            throw new IllegalArgumentException("not host:port: " + hostPort);
        }
        String host = hostPort.substring(0, colon);
        int port = Integer.parseInt(hostPort.substring(colon + 1));
        return new Address(host.isEmpty() || host.equals("?") ? defaultHost : host, port);
    }

    InetSocketAddress socket() {
        return InetSocketAddress.createUnresolved(host, port);
    }

    @Override
    public String toString() {
        return host.indexOf(':') >= 0 ? "[" + host + "]:" + port : host + ":" + port;
    }
}
