// Real redis-server processes with the pathlock module, on free loopback ports, each in its own
// directory, killed when the test process exits; and a TCP proxy that can drop or delay replies.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { after, before } from "node:test";
import { Cluster, type ClusterOptions, Redis, type RedisOptions } from "ioredis";

export const MODULE =
  process.env.PATHLOCK_MODULE ?? path.resolve(__dirname, "../../../target/release/libpathlock.so");

const running = new Set<ChildProcess>();
const clients = new Set<Redis | Cluster>();
process.on("exit", () => {
  for (const child of running) {
    child.kill("SIGKILL");
  }
});

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** A free loopback port whose cluster bus port (port + 10000) is free too. */
async function freePort(): Promise<number> {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 30000);
    if ((await canBind(port)) && (await canBind(port + 10000))) {
      return port;
    }
  }
}

async function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.setTimeout(500);
    socket.once("connect", () => socket.write("PING\r\n"));
    socket.once("data", (data) => {
      socket.destroy();
      resolve(data.toString().startsWith("+PONG"));
    });
    socket.once("error", () => resolve(false));
    socket.once("timeout", () => {
      socket.destroy();
      resolve(false);
    });
  });
}

/** Cleans up the clients a test made; call it from `after`. */
export function closeClients(): void {
  for (const client of clients) {
    client.disconnect();
  }
  clients.clear();
}

export class Server {
  private constructor(
    readonly port: number,
    readonly dir: string,
    private readonly child: ChildProcess,
  ) {}

  static async start(extra: string[] = []): Promise<Server> {
    const port = await freePort();
    const dir = mkdtempSync(path.join(tmpdir(), "pathlock-node-"));
    const child = spawn(
      "redis-server",
      [
        "--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
        "--appendonly", "no", "--logfile", path.join(dir, "redis.log"),
        "--loadmodule", MODULE, ...extra,
      ],
      { stdio: "ignore" },
    );
    running.add(child);
    child.once("exit", () => running.delete(child));
    const server = new Server(port, dir, child);
    for (let i = 0; i < 200; i += 1) {
      if (await ping(port)) {
        return server;
      }
      if (child.exitCode !== null) {
        break;
      }
      await sleep(25);
    }
    await server.stop();
    throw new Error(`redis-server on ${port} did not start; see ${dir}/redis.log (module ${MODULE})`);
  }

  /** An ioredis client of this server, disconnected by `closeClients`. */
  client(options: RedisOptions = {}): Redis {
    const client = new Redis({ host: "127.0.0.1", port: this.port, ...options });
    // Tests stop servers under their clients on purpose; the reconnect errors are expected.
    client.on("error", () => undefined);
    clients.add(client);
    return client;
  }

  /** Kills the server at once (SIGKILL) and waits for it to be gone. */
  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise((resolve) => this.child.once("exit", resolve));
      this.child.kill("SIGKILL");
      await exited;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * One server for the tests of the enclosing file or `describe`, started before them and stopped
 * (with the clients they made) after them; the answer gives it to the tests.
 */
export function oneServer(): () => Server {
  let server: Server | undefined;
  before(async () => {
    server = await Server.start();
  });
  after(async () => {
    closeClients();
    await server?.stop();
  });
  return () => server as Server;
}

/** A master with one replica that is connected and in sync. */
export async function startReplicated(): Promise<{ master: Server; replica: Server }> {
  const master = await Server.start();
  const replica = await Server.start(["--replicaof", "127.0.0.1", String(master.port)]);
  const admin = master.client();
  for (let i = 0; i < 200; i += 1) {
    const info = String(await admin.info("replication"));
    if (/connected_slaves:1/.test(info) && /slave0:.*state=online/.test(info)) {
      admin.disconnect();
      return { master, replica };
    }
    await sleep(50);
  }
  throw new Error("the replica did not come online");
}

/** Three masters in one Redis Cluster, every slot assigned and agreed on. */
export async function startCluster(): Promise<{ nodes: Server[]; cluster: (options?: ClusterOptions) => Cluster }> {
  const nodes: Server[] = [];
  for (let i = 0; i < 3; i += 1) {
    nodes.push(
      await Server.start([
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
      ]),
    );
  }
  await promisify(execFile)("redis-cli", [
    "--cluster", "create", ...nodes.map((n) => `127.0.0.1:${n.port}`), "--cluster-yes",
  ]);
  for (const node of nodes) {
    const admin = node.client();
    for (let i = 0; ; i += 1) {
      const info = String(await admin.call("CLUSTER", "INFO"));
      const slots = (await admin.call("CLUSTER", "SLOTS")) as unknown[];
      if (info.includes("cluster_state:ok") && slots.length === 3) {
        break;
      }
      if (i > 400) {
        throw new Error(`cluster node ${node.port} did not converge`);
      }
      await sleep(50);
    }
    admin.disconnect();
  }
  const cluster = (options: ClusterOptions = {}): Cluster => {
    const client = new Cluster(
      nodes.map((n) => ({ host: "127.0.0.1", port: n.port })),
      options,
    );
    client.on("error", () => undefined);
    clients.add(client);
    return client;
  };
  return { nodes, cluster };
}

/**
 * Forwards a loopback port to a server. `dropReplies = n` makes the next n chunks of replies
 * vanish along with the connection (the server did the work, the client never hears of it);
 * `delayMs` holds every reply back for that long, in order.
 */
export class Proxy {
  dropReplies = 0;
  delayMs = 0;
  private readonly sockets = new Set<net.Socket>();

  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  static async start(target: number): Promise<Proxy> {
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const proxy = new Proxy(server, (server.address() as net.AddressInfo).port);
    server.on("connection", (downstream) => proxy.pipe(downstream, target));
    return proxy;
  }

  private pipe(downstream: net.Socket, target: number): void {
    const upstream = net.connect(target, "127.0.0.1");
    this.sockets.add(downstream).add(upstream);
    const close = (): void => {
      downstream.destroy();
      upstream.destroy();
      this.sockets.delete(downstream);
      this.sockets.delete(upstream);
    };
    downstream.on("data", (chunk) => upstream.write(chunk));
    upstream.on("data", (chunk) => {
      if (this.dropReplies > 0) {
        this.dropReplies -= 1;
        close();
        return;
      }
      if (this.delayMs > 0) {
        setTimeout(() => downstream.write(chunk), this.delayMs);
      } else {
        downstream.write(chunk);
      }
    });
    downstream.on("error", close).on("close", close);
    upstream.on("error", close).on("close", close);
  }

  close(): void {
    for (const socket of this.sockets) {
      socket.destroy();
    }
    this.server.close();
  }
}
