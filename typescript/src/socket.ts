/**
 * The agent socket (/ws/agents/) as the cached client and waitForApproval use it:
 * JSON frames in, pushes out to a handler. Only the standard WebSocket interface
 * is used (the browser's, Deno's, Node 22's global, or the `ws` package's), so
 * the key and agent travel as `?api_key=&agent_id=` (a browser cannot set
 * handshake headers; the server takes either).
 */

/**
 * What this SDK needs of a WebSocket: the WHATWG interface's common part. The
 * handlers take `never` because the SDK only assigns them: so the browser's
 * WebSocket and the `ws` package's, whose event types differ, both fit.
 */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: ((event: never) => void) | null;
  onmessage: ((event: never) => void) | null;
  onclose: ((event: never) => void) | null;
  onerror: ((event: never) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

const OPEN = 1;

/** The constructor given, else the runtime's global one, else undefined. */
export function resolveWebSocket(given?: WebSocketConstructor): WebSocketConstructor | undefined {
  if (given) return given;
  const global = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  return typeof global === "function" ? global : undefined;
}

function textOf(data: unknown): string {
  if (typeof data === "string") return data;
  // The `ws` package may hand over a Buffer or ArrayBuffer for a text frame.
  if (data instanceof ArrayBuffer || ArrayBuffer.isView(data)) {
    return new TextDecoder().decode(data as ArrayBuffer);
  }
  return String(data);
}

export interface AgentSocketOptions {
  url: string;
  WebSocket: WebSocketConstructor;
  onPush: (frame: Record<string, unknown>) => void;
  /** Called after every (re)connection, before waiters are released. */
  onOpen?: () => void;
  /** Reconnect after an unexpected close (doubling from 100 ms up to 5 s). */
  reconnect?: boolean;
  connectTimeoutMs?: number;
}

export class AgentSocket {
  private socket: WebSocketLike | undefined;
  private closedByUs = false;
  private retryMs = 100;
  private readonly waiters: { type: string; match: (f: Record<string, unknown>) => boolean; resolve: (f: Record<string, unknown>) => void }[] = [];

  constructor(private readonly options: AgentSocketOptions) {}

  get isOpen(): boolean {
    return this.socket !== undefined && this.socket.readyState === OPEN;
  }

  /** Opens the socket; rejects if it cannot (a refused handshake, a timeout). */
  connect(): Promise<void> {
    this.closedByUs = false;
    return new Promise((resolve, reject) => {
      const socket = new this.options.WebSocket(this.options.url);
      this.socket = socket;
      let opened = false;
      const timer = setTimeout(() => {
        if (!opened) {
          socket.close();
          reject(new Error(`could not open ${redact(this.options.url)} in time`));
        }
      }, this.options.connectTimeoutMs ?? 10_000);
      socket.onopen = () => {
        opened = true;
        clearTimeout(timer);
        this.retryMs = 100;
        this.options.onOpen?.();
        resolve();
      };
      socket.onerror = () => {
        if (!opened) {
          clearTimeout(timer);
          reject(new Error(`could not open ${redact(this.options.url)}`));
        }
      };
      socket.onmessage = (event: { data: unknown }) => this.received(event.data);
      socket.onclose = () => {
        clearTimeout(timer);
        if (!opened) {
          reject(new Error(`${redact(this.options.url)} closed during the handshake`));
          return;
        }
        if (this.socket === socket && !this.closedByUs && this.options.reconnect !== false) {
          this.scheduleReconnect();
        }
      };
    });
  }

  private scheduleReconnect(): void {
    const wait = this.retryMs;
    this.retryMs = Math.min(this.retryMs * 2, 5_000);
    setTimeout(() => {
      if (this.closedByUs) return;
      this.connect().catch(() => this.scheduleReconnect());
    }, wait);
  }

  private received(data: unknown): void {
    let frame: unknown;
    try {
      frame = JSON.parse(textOf(data));
    } catch {
      return; // the server sends JSON only; anything else is not ours to act on
    }
    if (frame === null || typeof frame !== "object") return;
    const f = frame as Record<string, unknown>;
    const i = this.waiters.findIndex((w) => w.type === f["type"] && w.match(f));
    if (i >= 0) {
      const [waiter] = this.waiters.splice(i, 1);
      waiter?.resolve(f);
    }
    this.options.onPush(f);
  }

  /** Sends a frame (dropped while the socket is down: reopening resubscribes). */
  send(frame: Record<string, unknown>): boolean {
    if (!this.isOpen || this.socket === undefined) return false;
    this.socket.send(JSON.stringify(frame));
    return true;
  }

  /** Sends a frame and waits for the answer of `type` (or `timeoutMs`); false if none came. */
  async ask(
    frame: Record<string, unknown>,
    type: string,
    match: (f: Record<string, unknown>) => boolean = () => true,
    timeoutMs = 5_000,
  ): Promise<boolean> {
    const answered = new Promise<boolean>((resolve) => {
      let timer: ReturnType<typeof setTimeout> | undefined = undefined;
      const waiter = {
        type,
        match,
        resolve: () => {
          clearTimeout(timer);
          resolve(true);
        },
      };
      this.waiters.push(waiter);
      timer = setTimeout(() => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) {
          this.waiters.splice(i, 1);
          resolve(false);
        }
      }, timeoutMs);
    });
    if (!this.send(frame)) return false;
    return answered;
  }

  close(): void {
    this.closedByUs = true;
    this.socket?.close(1000);
    this.socket = undefined;
  }
}

/** The URL without its key, for messages. */
function redact(url: string): string {
  return url.replace(/api_key=[^&]*/, "api_key=…");
}
