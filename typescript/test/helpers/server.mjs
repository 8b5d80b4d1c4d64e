// Starts a live ZeroLock server for a test file, as tests/conftest.py's
// start_server does for pytest: a fresh data dir and SQLite file, `manage.py
// migrate`, keys from `manage.py createapikey`, then the web server bin/serve
// would run (uvicorn, or ZEROLOCK_SERVER=daphne) on a free port. stop() kills it.
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync, openSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const here = dirname(fileURLToPath(import.meta.url));
export const REPO = resolve(here, "..", "..", "..");
export const PYTHON = process.env.ZEROLOCK_PYTHON || join(REPO, ".venv", "bin", "python");
const WEB_SERVERS = { uvicorn: "zerolock_site.uvicorn_server", daphne: "zerolock_site.daphne_server" };

function freePort() {
  return new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.unref();
    probe.on("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = /** @type {import("node:net").AddressInfo} */ (probe.address());
      probe.close(() => resolvePort(port));
    });
  });
}

/**
 * @param {Record<string, string>} keySpecs name -> createapikey arguments after the name,
 *   e.g. { admin: "--permissions admin", reader: "--permissions shard:read" }
 * @param {Record<string, string>} [extraEnv]
 */
export async function startServer(keySpecs, extraEnv = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), "zerolock-ts-"));
  /** @type {Record<string, string | undefined>} */
  const env = {
    ...process.env,
    ZEROLOCK_DATA_DIR: dataDir,
    ZEROLOCK_DB_PATH: join(dataDir, "db.sqlite3"),
    // Swarm tests send thousands of requests from one address with one key.
    ZEROLOCK_RATE_LIMIT_PER_MINUTE: "100000000",
    ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE: "100000000",
    ZEROLOCK_WS_FAILED_HANDSHAKES_PER_MINUTE: "100000000",
    ...extraEnv,
  };
  delete env.DATABASE_URL;
  const manage = (/** @type {string[]} */ ...args) =>
    run(PYTHON, ["manage.py", ...args], { cwd: REPO, env, maxBuffer: 1 << 24 });
  await manage("migrate", "-v", "0");
  /** @type {Record<string, string>} */
  const keys = {};
  for (const [name, spec] of Object.entries(keySpecs)) {
    const { stdout } = await manage("createapikey", name, ...spec.split(/\s+/).filter(Boolean));
    keys[name] = stdout.trim().split("\n").at(-1) ?? "";
  }
  const port = await freePort();
  const logPath = join(dataDir, "server.log");
  const module = WEB_SERVERS[/** @type {"uvicorn"} */ (env.ZEROLOCK_SERVER || "uvicorn")];
  const url = `http://127.0.0.1:${port}`;
  /** @type {import("node:child_process").ChildProcess} */
  let proc;
  // The server must not outlive this test process, however that ends.
  const killOnExit = () => proc?.kill("SIGKILL");
  const killOnSignal = (/** @type {NodeJS.Signals} */ signal) => {
    killOnExit();
    process.exit(signal === "SIGINT" ? 130 : 143);
  };
  process.on("exit", killOnExit);
  process.once("SIGINT", killOnSignal);
  process.once("SIGTERM", killOnSignal);

  async function launch() {
    proc = spawn(PYTHON, ["-m", module, "--host", "127.0.0.1", "--port", String(port)], {
      cwd: REPO,
      env,
      stdio: ["ignore", openSync(logPath, "a"), openSync(logPath, "a")],
    });
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        const response = await fetch(`${url}/api/health`);
        await response.text();
        return;
      } catch {
        if (proc.exitCode !== null || Date.now() > deadline) {
          proc.kill("SIGKILL");
          throw new Error(`live server did not start:\n${readFileSync(logPath, "utf8")}`);
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  async function halt() {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((r) => proc.once("exit", r));
    proc.kill("SIGTERM");
    const timer = setTimeout(() => proc.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  }

  await launch();
  return {
    url,
    keys,
    env,
    dataDir,
    /** Stops the server and starts it again on the same port and database. */
    async restart() {
      await halt();
      await launch();
    },
    async stop() {
      process.off("exit", killOnExit);
      process.off("SIGINT", killOnSignal);
      process.off("SIGTERM", killOnSignal);
      await halt();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
