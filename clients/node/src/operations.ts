// The operations' paths and notes: checked before anything is sent.
// Level 1: builds on `types`.
import type { LockRequest, LockRequestLike, Mode } from "./types";

/** The path's segments as the server counts them: empty ones and `.` are dropped. */
function segments(path: string): string[] {
  return path.split("/").filter((s) => s !== "" && s !== ".");
}

/**
 * `path` as an operation helper takes it: a file or folder, never the whole project. A helper
 * called with `""` or `/` most likely got a variable that was never set; locking the whole project
 * must be asked for in so many words, with `lock([["WRITE", "/"]])`.
 */
export function named(path: string, what = "path"): string {
  if (typeof path !== "string") {
    throw new TypeError(`${what} must be a string, not ${typeof path}`);
  }
  if (segments(path).length === 0) {
    throw new TypeError(
      `${what} ${JSON.stringify(path)} names the whole project, not a file or folder; to lock the whole project, say so: lock([["WRITE", "/"]]) or lock([["READ", "/"]])`,
    );
  }
  return path;
}

/**
 * The segments of a path that an operation compares with another, `..` refused: the server refuses
 * it too, and it would make `/A/../A/C` look unrelated to `/A`.
 */
function normalised(path: string, what: string): string[] {
  const parts = segments(path);
  if (parts.includes("..")) {
    throw new TypeError(`${what} ${JSON.stringify(path)} has a '..' segment, which pathlock refuses`);
  }
  return parts;
}

/**
 * Where `path` lands when it is moved or copied into `folder`: `folder/<last segment of path>`.
 * Refused when that is `path` itself or inside it (a folder into itself), or when `folder` is the
 * folder `path` is already in (the target would be the source).
 */
export function into(folder: string, path: string, operation: "move" | "copy"): string {
  if (typeof folder !== "string" || folder === "") {
    throw new TypeError(`intoFolder must name a folder ("/" for the project root), not ${JSON.stringify(folder)}`);
  }
  const source = normalised(named(path), "path");
  const target = normalised(folder, "intoFolder");
  if (source.every((segment, i) => target[i] === segment)) {
    throw new TypeError(
      `cannot ${operation} ${path} into ${folder}: a folder cannot go into itself or its own subtree`,
    );
  }
  if (target.length === source.length - 1 && target.every((segment, i) => source[i] === segment)) {
    throw new TypeError(
      `cannot ${operation} ${path} into ${folder}: it is already in that folder (the target would be the source itself)`,
    );
  }
  return `/${[...target, source[source.length - 1]].join("/")}`;
}

/**
 * Where `path` goes when it is renamed to `newName`: the same folder, the new name. Anything but
 * one new name is refused: rename takes a name, and `move` changes folders.
 */
export function sibling(path: string, newName: string): string {
  const source = normalised(named(path), "path");
  if (
    typeof newName !== "string" ||
    ["", ".", "..", source[source.length - 1]].includes(newName) ||
    newName.includes("/")
  ) {
    throw new TypeError(
      `rename takes a name for ${path} in the same folder, not ${JSON.stringify(newName)}: a name has no '/' and is not '', '.', '..' or the current name; to change folders, use move`,
    );
  }
  return `/${[...source.slice(0, -1), newName].join("/")}`;
}

/** Validates requests given as objects or `[mode, path]` pairs and returns them as objects. */
export function normaliseRequests(requests: readonly LockRequestLike[]): LockRequest[] {
  if (requests.length === 0) {
    throw new TypeError("at least one lock must be requested");
  }
  return requests.map((request) => {
    const [mode, path] = Array.isArray(request)
      ? (request as readonly [Mode, string])
      : [(request as LockRequest).mode, (request as LockRequest).path];
    const upper = String(mode).toUpperCase();
    if (upper !== "READ" && upper !== "WRITE") {
      throw new TypeError(`mode must be READ or WRITE, not ${JSON.stringify(mode)}`);
    }
    if (typeof path !== "string") {
      throw new TypeError(`path must be a string, not ${typeof path}`);
    }
    if (path === "") {
      throw new TypeError(`lock path is empty; write "/" to lock the whole project`);
    }
    return { mode: upper, path };
  });
}

export const write = (path: string): LockRequest => ({ mode: "WRITE", path });
export const read = (path: string): LockRequest => ({ mode: "READ", path });

/** The default note of `lock(requests)`. */
export function described(locks: readonly LockRequest[]): string {
  return `lock ${locks.map((l) => `${l.mode} ${l.path}`).join(", ")}`;
}

/**
 * The longest default note, in bytes: well under the server's `pathlock.max-note-bytes` (256 by
 * default), however long the paths it names.
 */
export const DEFAULT_NOTE_BYTES = 100;

/** An operation's default note, `"move /A/C -> /B"`, cut to `DEFAULT_NOTE_BYTES`. */
export function defaultNote(words: string): string {
  const bytes = Buffer.from(words, "utf8");
  if (bytes.length <= DEFAULT_NOTE_BYTES) {
    return words;
  }
  // Cut at a character boundary: drop the continuation bytes of a character cut in two.
  let end = DEFAULT_NOTE_BYTES - 3;
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) {
    end -= 1;
  }
  return `${bytes.subarray(0, end).toString("utf8")}...`;
}
