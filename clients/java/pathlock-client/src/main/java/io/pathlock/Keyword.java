package io.pathlock;

import io.lettuce.core.protocol.ProtocolKeyword;
import java.nio.charset.StandardCharsets;

/** The commands the client sends through Lettuce's {@code dispatch}: the module's, and two of Redis's own. */
// Enum.name() stands in for ProtocolKeyword.name(), which Lettuce 7 deprecates (its own CommandType
// is an enum too): nothing calls it here.
@SuppressWarnings("deprecation")
enum Keyword implements ProtocolKeyword {
    ACQUIRE("PATHLOCK.ACQUIRE"),
    RENEW("PATHLOCK.RENEW"),
    RELEASE("PATHLOCK.RELEASE"),
    CHECK("PATHLOCK.CHECK"),
    LOCKS("PATHLOCK.LOCKS"),
    WAITERS("PATHLOCK.WAITERS"),
    /** Counts the replicas that acknowledged this connection's writes. */
    WAIT("WAIT"),
    /** Sent before a command that follows a cluster's {@code -ASK} redirect. */
    ASKING("ASKING");

    private final String command;
    private final byte[] bytes;

    Keyword(String command) {
        this.command = command;
        this.bytes = command.getBytes(StandardCharsets.US_ASCII);
    }

    @Override
    public byte[] getBytes() {
        return bytes;
    }

    @Override
    public String toString() {
        return command;
    }
}
