package io.pathlock;

/** A lock's mode. Both cover the path's whole subtree. */
public enum Mode {
    /** Shared: any number of owners may read a path at once. */
    READ,
    /** Exclusive: nobody else may read or write the path, its ancestors' locks or its subtree. */
    WRITE;

    /** The mode named by a reply or by a caller, in any case. */
    static Mode parse(String name) {
        for (Mode mode : values()) {
            if (mode.name().equalsIgnoreCase(name)) {
                return mode;
            }
        }
        throw new IllegalArgumentException("lock mode must be READ or WRITE, not \"" + name + "\"");
    }
}
