import type { LockRequest, LockRequestLike, Mode } from "./types";

/** The last segment of `path`, as the server splits it (empty segments and `.` dropped). */
export function lastSegment(path: string): string {
  const segments = path.split("/").filter((s) => s !== "" && s !== ".");
  const last = segments[segments.length - 1];
  if (last === undefined) {
    throw new TypeError(`the project root has no name to move or copy: ${JSON.stringify(path)}`);
  }
  return last;
}

/** `folder/name`, without doubling a slash the folder already ends with. */
export function inside(folder: string, name: string): string {
  return folder.endsWith("/") ? `${folder}${name}` : `${folder}/${name}`;
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
    return { mode: upper, path };
  });
}

export const write = (path: string): LockRequest => ({ mode: "WRITE", path });
export const read = (path: string): LockRequest => ({ mode: "READ", path });
