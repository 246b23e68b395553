/**
 * tether.js — the Tether browser client: one agent session that survives
 * dropped connections. An ES module with no dependencies and no build step;
 * every Tether node serves it at /tether.js. The wire protocol it speaks is
 * the project's PROTOCOL.md.
 *
 * @example
 *   import { Tether } from "/tether.js";
 *   const saved = JSON.parse(localStorage.getItem("chat") || "null");
 *   const t = new Tether({
 *     token: async () => myLogin(),  // a JWT string, or a (async) function returning one
 *     state: saved,                  // {sessionId, lastSeq, outbox} kept from last time, or null
 *                                    // (and optionally stream: {seq, part, text} of a reply held)
 *   });
 *   t.on("persist", s => localStorage.setItem("chat", JSON.stringify(s)));
 *   t.on("state", s => show(s.state, s));  // connecting | live | reconnecting | offline | expired
 *   t.on("entry", e => render(e));         // a log entry {seq, role, content, timestamp, metadata}
 *   t.on("delta", d => renderPartial(d));  // {seq, text}: the reply being streamed, so far
 *   t.on("send", s => mark(s.id, s.status)); // pending | acked | refused
 *   t.connect();
 *   t.send("compare two laptops");          // returns the send's id
 *   t.send("no, cheaper ones", undefined, { interrupt: true }); // cuts the running turn short first
 *   t.cancel();                             // Stop: ends the running turn, keeps what it produced
 *   t.approve(callId, true);                // the answer to a tool call awaiting approval
 *
 * What it does for the application:
 * - Connects to `url` (default: the page's origin + /v1/ws), says hello with
 *   the token and resumes `state.sessionId` from `state.lastSeq`. A resuming
 *   hello carries `"attach": "shared"` (option `attach`; null leaves it out),
 *   so two tabs or devices on one session both stay live and each sees every
 *   entry and delta, whoever caused it.
 * - Heartbeat: after `pingAfter` ms (10 s) without any frame it sends `ping`;
 *   no frame within `pongTimeout` ms (4 s) more means the connection is lost.
 *   A silent loss is so noticed within 14 s of the last frame, which leaves
 *   the reconnect and resume inside PROTOCOL.md's 15 s. A send not acked
 *   within `ackTimeout` ms (10 s) also counts as a lost connection.
 * - Reconnects with exponential backoff and jitter (first try within
 *   `backoffMin` ms) and keeps trying until the session is resumed, has
 *   expired or was completed. A connection that flaps (lost within 10 s of
 *   going live) does not reset the backoff.
 * - Sends are queued and go out one at a time in order (the next once the
 *   previous is acked), so they keep their order and a refusal is always
 *   about a known send. Unacked sends are resent after a reconnect with their
 *   original id (the server stores an id once), and are part of `persist`ed
 *   state so they survive a reload. A send whose frame is over `maxFrame`
 *   bytes is refused without being sent. `too_large`, `bad_request` and a
 *   close 1009 refuse that send for good; `rate_limited` retries it after a
 *   pause (1 s, doubling, with jitter). A send right after which the
 *   connection broke three times running (within 2 s of sending it each
 *   time) is refused as "failed" rather than resent forever.
 * - Steering a turn: `cancel(replyTo?)` (Stop), `approve(callId, approved)`
 *   and `send(content, metadata, {interrupt: true})`; see each method.
 * - Entries arrive in seq order; a duplicate is dropped and a gap makes the
 *   client reconnect and resume from the last seq it holds. Entries a resume
 *   omitted, and with `history: "all"` (the default) every entry before the
 *   saved `lastSeq` (this instance holds none of them after a reload), are
 *   fetched with `history` pages; such entries reach "entry" out of seq order,
 *   with `source: "history"`. The "synced" event says the transcript is whole.
 * - Streamed replies (`delta`): parts are joined per seq, a delta `from: 0`
 *   replaces what was held, the entry supersedes them; a reconnect names the
 *   parts held in `hello.stream` so the server continues after them.
 * - Close codes: 1012, 1013, 1011, 1006, 1001 and other transient ones
 *   reconnect. 1008 after `unauthorized`: a token function is asked again
 *   (event "auth" with need "token"; after 3 refusals in a row it goes
 *   offline); a fixed token goes offline until `setToken` + `connect`.
 *   4003 (`reauth_required`): offline, event "auth" with need "login"; give a
 *   fresh token with `setToken` and call `connect`.
 *   4001 (a newer connection resumed this session without attaching shared —
 *   an older client, or `attach: null`): offline with reason "superseded" and
 *   no automatic retry, so two tabs never take the session from each other in
 *   a loop; the user's explicit `connect()` takes it back. A 4001 that
 *   follows an attempt of this very client that it gave up on (its hello may
 *   have landed late) reconnects instead.
 *   1007, 1003 and any other 1008: offline with an "error" (a bug, not the
 *   network; retrying would loop).
 * - `drop()` simulates a phone losing signal; see its doc.
 *
 * Events (`on(type, fn)` returns an unsubscribe function):
 *   state    {state, reason, code, attempt, retryAt, resumed, missed, holes}
 *   session  the server's session frame (pending_tool_call, context, …)
 *   entry    {seq, role, content, timestamp, metadata, source: "live"|"replay"|"history"}
 *   delta    {seq, part, text}: text is the whole reply streamed so far
 *   send     {id, content, status: "pending"|"acked"|"refused", seq?, code?, message?}
 *   tool     {running}: the tool call in flight or waiting for approval
 *            (pending_tool_call shape: status "started" or "awaiting_approval") or null
 *   synced   {lastSeq}: every entry up to lastSeq has been delivered
 *   auth     {need: "token"|"login", message}
 *   error    {code, message, id?, fatal?}
 *   context  {context}
 *   persist  {sessionId, lastSeq, outbox}: save it to resume after a reload
 *
 * @module tether
 */

const DEFAULTS = {
  url: "", // page origin + /v1/ws
  token: null, // string or () => string | Promise<string>
  state: null, // {sessionId, lastSeq, outbox}
  history: "all", // "all": page every entry this instance lacks; "missed": only what a resume omitted
  pingAfter: 10000,
  pongTimeout: 4000, // PROTOCOL.md recommends at most 5 s; 4 s keeps loss + resume within 15 s
  ackTimeout: 10000,
  connectTimeout: 8000, // token + socket open + session frame
  backoffMin: 250,
  backoffMax: 8000,
  maxFrame: 65536, // the server's --max-frame (PROTOCOL.md default)
  maxContent: 0, // the server's --max-content, if known (0: let the server judge)
  historyPage: 200,
  attach: "shared", // hello.attach on a resume (PROTOCOL.md: several connections on one session); null: none
};

const enc = new TextEncoder();
const bytes = (s) => enc.encode(s).length;

/** Ids from crypto.getRandomValues, which (unlike randomUUID) works on plain http too. */
function newId(prefix) {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return prefix + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** Seconds until a JWT's exp, or Infinity when it cannot be read. */
function jwtTTL(token) {
  try {
    const p = JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    return typeof p.exp === "number" ? p.exp - Date.now() / 1000 : Infinity;
  } catch {
    return Infinity;
  }
}

/** Close codes after which retrying cannot help (the client must change something). */
const FATAL_CLOSE = { 1003: "binary frame refused", 1007: "frame was not valid JSON" };

export class Tether {
  /** @param {Partial<typeof DEFAULTS>} options */
  constructor(options = {}) {
    this.opts = { ...DEFAULTS, ...options };
    if (!this.opts.url) {
      this.opts.url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/ws";
    }
    const st = this.opts.state || {};
    this.sessionId = st.sessionId || null;
    this.lastSeq = st.lastSeq || 0;
    /** Missing seq ranges [from, to] still to fetch with `history`, oldest first. */
    if (this.opts.history === "all") this.holes = this.lastSeq > 0 ? [[1, this.lastSeq]] : [];
    else this.holes = (st.holes || []).map(([a, b]) => [a, b]);
    this.seen = new Set();
    /** Unacked sends by id, in the order they were made. */
    this.outbox = new Map();
    for (const o of st.outbox || []) this.outbox.set(o.id, { id: o.id, content: o.content, metadata: o.metadata, interrupt: !!o.interrupt, retryAt: 0, errors: 0, strikes: 0 });
    // {seq, part, text}: the reply being streamed. A saved one (state.stream)
    // is named in the first hello, so the server continues after its parts.
    const ss = st.stream;
    this.stream = ss && Number.isInteger(ss.seq) && Number.isInteger(ss.part) && typeof ss.text === "string" && ss.seq > this.lastSeq
      ? { seq: ss.seq, part: ss.part, text: ss.text } : null;
    this.tool = null;
    this.state = "offline";
    this.maxFrame = this.opts.maxFrame;
    this._handlers = new Map();
    this._ws = null;
    this._live = false;
    this._wanted = false;
    this._attempt = 0;
    this._timers = {};
    this._abandoned = new Map(); // socket -> release()
    this._restored = false;
    this._authFailures = 0;
    this._pingN = 0;
    this._liveInfo = {};
    // Back online, or back in view (timers of hidden tabs are throttled): check now.
    const wake = () => {
      if (this._wanted && this._timers.retry) this._open();
      else if (this._live) this._watch();
    };
    if (typeof window !== "undefined") window.addEventListener("online", wake);
    if (typeof document !== "undefined") document.addEventListener("visibilitychange", () => document.hidden || wake());
  }

  /** Subscribes fn to events of type; returns a function that unsubscribes. */
  on(type, fn) {
    if (!this._handlers.has(type)) this._handlers.set(type, new Set());
    this._handlers.get(type).add(fn);
    return () => this._handlers.get(type).delete(fn);
  }

  _emit(type, detail) {
    for (const fn of this._handlers.get(type) || []) {
      try { fn(detail); } catch (e) { console.error("tether: handler for", type, e); }
    }
  }

  /** What to keep (localStorage) to resume this session after a reload. */
  get persisted() {
    const st = {
      sessionId: this.sessionId,
      lastSeq: this.lastSeq,
      outbox: [...this.outbox.values()].map(({ id, content, metadata, interrupt }) => (interrupt ? { id, content, metadata, interrupt } : { id, content, metadata })),
    };
    if (this.opts.history !== "all") st.holes = this.holes;
    return st;
  }

  _persist() { this._emit("persist", this.persisted); }

  _setState(state, extra = {}) {
    this.state = state;
    this._emit("state", { state, attempt: this._attempt, holes: this._missingCount(), ...extra });
  }

  _missingCount() { return this.holes.reduce((n, [a, b]) => n + b - a + 1, 0); }

  /** Starts (or restarts after offline/expired) connecting; a no-op while connected or connecting. */
  connect() {
    if (!this._restored) {
      this._restored = true;
      for (const o of this.outbox.values()) this._emit("send", { id: o.id, content: o.content, status: "pending" });
    }
    this._wanted = true;
    this._authFailures = 0;
    if (this._ws) return;
    this._attempt = 0;
    this._open();
  }

  /** Replaces the token (after an "auth" event); call connect() afterwards if offline. */
  setToken(token) {
    this.opts.token = token;
    this._token = null;
  }

  /** Closes the connection on purpose (close 1000); the session stays resumable. */
  close() {
    this._wanted = false;
    this._dropSocket(true);
    this._setState("offline", { reason: "closed" });
  }

  /**
   * Simulates a signal loss, as a phone going out of coverage: the socket is
   * abandoned at once without a close handshake — its handlers are removed,
   * no close frame is sent, and nothing more is read from or written to it,
   * so the server learns nothing until the new connection resumes the session
   * (the new connection attaches shared, so the server keeps the old one
   * too; once the new one is live the old socket is closed, so it does not
   * linger as one more connection of the session). The client then does
   * exactly what it does when the heartbeat finds a silent connection: state
   * "reconnecting", reconnect (within `backoffMin`), resume from the last
   * seq, resend unacked sends with their ids.
   */
  drop() {
    if (!this._ws) return;
    this._lost("dropped", false);
  }

  /** Forgets the session (and unsent messages) and starts a new one. */
  newSession() {
    this._dropSocket(true);
    for (const o of this.outbox.values()) this._refuse(o, "abandoned", "not sent: a new session was started");
    this.sessionId = null;
    this.lastSeq = 0;
    this.holes = [];
    this.seen.clear();
    this.stream = null;
    this._setTool(null);
    this._persist();
    this._everLive = false;
    this.connect();
  }

  /**
   * Queues a message; returns its id. Status goes out as "send" events:
   * pending now, then acked (with its seq) or refused (with a code).
   * `options.id` sets the send id (1–64 chars) instead of a random one, so
   * a caller that retries with its own id (an AI SDK message id) has it
   * stored once; an id already queued is not queued twice.
   * `options.interrupt: true` sends it with PROTOCOL.md's `interrupt`: the
   * turn running when it reaches the server is cancelled (as by `cancel()`)
   * before this message's turn starts; without it the message waits for the
   * running turn, as before.
   */
  send(content, metadata, options = {}) {
    const id = options.id === undefined ? newId("c-") : String(options.id);
    if (this.outbox.has(id)) return id;
    const o = { id, content: String(content ?? ""), metadata, interrupt: !!options.interrupt, retryAt: 0, errors: 0, strikes: 0 };
    if (id.length < 1 || id.length > 64) return this._refuse(o, "bad_request", "a send id has 1 to 64 characters"), id;
    this._emit("send", { id: o.id, content: o.content, status: "pending" });
    const frameBytes = bytes(this._frame(o));
    if (o.content === "") return this._refuse(o, "bad_request", "an empty message cannot be sent"), o.id;
    if (this.opts.maxContent && bytes(o.content) > this.opts.maxContent) {
      return this._refuse(o, "too_large", `the message is ${bytes(o.content)} bytes; the server takes at most ${this.opts.maxContent}`), o.id;
    }
    if (frameBytes > this.maxFrame) {
      return this._refuse(o, "too_large", `the message is ${frameBytes} bytes on the wire; the server takes at most ${this.maxFrame}`), o.id;
    }
    this.outbox.set(o.id, o);
    this._persist();
    this._flush();
    return o.id;
  }

  /** Merges keys into the session's user context (sent when live). */
  setContext(set) { return this._write({ type: "context", set }); }

  /**
   * Stops the turn answering user entry replyTo (without it: the turn
   * running now) — PROTOCOL.md's `cancel`. Sent when live; returns whether
   * it was sent. A server without `cancel` answers an "error" event
   * (bad_request, unknown frame type) and goes on; the connection stays.
   */
  cancel(replyTo) {
    const f = { type: "cancel" };
    if (Number.isInteger(replyTo) && replyTo > 0) f.reply_to = replyTo;
    return this._write(f);
  }

  /**
   * Answers a tool call waiting for approval (a tool entry, or the session's
   * pending_tool_call, with status "awaiting_approval") — PROTOCOL.md's
   * `approve`. Sent when live; returns whether it was sent. The decision
   * comes back as the call's next tool entry (status "approved" or
   * "denied"); the first decision stands. A call not waiting is answered
   * with an "error" event (bad_request).
   */
  approve(callId, approved) {
    if (typeof callId !== "string" || !callId) return false;
    return this._write({ type: "approve", call_id: callId, approved: !!approved });
  }

  /** Ends the session for good (sent when live). */
  complete() { return this._write({ type: "complete" }); }

  _write(frame) {
    if (!this._live) return false;
    this._ws.send(JSON.stringify(frame));
    return true;
  }

  _frame(o) {
    const f = { type: "send", id: o.id, content: o.content };
    if (o.metadata) f.metadata = o.metadata;
    if (o.interrupt) f.interrupt = true;
    return JSON.stringify(f);
  }

  _refuse(o, code, message) {
    this.outbox.delete(o.id);
    if (this._inflight && this._inflight.id === o.id) this._inflight = null;
    this._emit("send", { id: o.id, content: o.content, status: "refused", code, message });
    this._persist();
  }

  // ---- connecting -------------------------------------------------------

  _clear(name) {
    clearTimeout(this._timers[name]);
    delete this._timers[name];
  }

  _later(name, ms, fn) {
    this._clear(name);
    this._timers[name] = setTimeout(() => { delete this._timers[name]; fn(); }, Math.max(0, ms));
  }

  async _open() {
    this._clear("retry");
    this._setState(this._everLive || this._attempt > 0 ? "reconnecting" : "connecting", { reason: this._why });
    const gen = (this._gen = (this._gen || 0) + 1);
    this._later("connect", this.opts.connectTimeout, () => this._lost("no answer from the server in time", true));
    let token;
    try {
      token = await this._getToken();
    } catch (e) {
      if (gen !== this._gen) return;
      this._clear("connect");
      this._emit("error", { code: "token", message: e.message, fatal: !!e.fatal, cause: e });
      if (e.fatal) return this._stop("offline", { reason: "token", message: e.message });
      return this._retry("could not get a token: " + e.message);
    }
    if (gen !== this._gen || !this._wanted) return;
    const ws = new WebSocket(this.opts.url);
    this._ws = ws;
    this._lastError = null;
    this._helloSent = false;
    ws.onopen = () => {
      const hello = { type: "hello", token };
      if (this.sessionId) {
        hello.session_id = this.sessionId;
        hello.last_seq = this.lastSeq;
        if (this.opts.attach) hello.attach = this.opts.attach;
        if (this.stream && this.stream.seq > this.lastSeq) hello.stream = { seq: this.stream.seq, part: this.stream.part };
      }
      this._resumeFrom = this.sessionId ? this.lastSeq : null;
      ws.send(JSON.stringify(hello));
      this._helloSent = true;
    };
    ws.onmessage = (ev) => {
      this._lastRx = Date.now();
      let f;
      try { f = JSON.parse(ev.data); } catch { return; }
      if (f && typeof f === "object") this._onFrame(f);
    };
    ws.onclose = (ev) => this._onClose(ev.code, ev.reason);
    ws.onerror = () => {}; // a close event follows
  }

  async _getToken() {
    const t = this.opts.token;
    if (typeof t === "string" && t) return t;
    if (typeof t !== "function") throw Object.assign(new Error("no token given"), { fatal: true });
    if (this._token && jwtTTL(this._token) > 30) return this._token; // reuse: no HTTP round trip on reconnect
    const timeout = new Promise((_, reject) => {
      this._later("token", this.opts.connectTimeout, () => reject(new Error("timed out")));
    });
    try {
      this._token = await Promise.race([Promise.resolve(t()), timeout]);
    } finally {
      this._clear("token");
    }
    if (typeof this._token !== "string" || !this._token) throw new Error("the token function returned no token");
    return this._token;
  }

  /** Stops using the current socket: with a close handshake, or abandoned as in a signal loss. */
  _dropSocket(handshake) {
    const ws = this._ws;
    this._ws = null;
    this._live = false;
    this._inflight = null;
    this._historyAsked = null;
    this._expectReplay = false;
    this._gen = (this._gen || 0) + 1;
    for (const name of ["connect", "watch", "send"]) this._clear(name);
    const hadSession = this._sessionOnSocket;
    this._sessionOnSocket = false;
    if (!ws) return;
    ws.onopen = ws.onmessage = ws.onerror = null;
    if (this._helloSent && !hadSession) this._gaveUpHelloAt = Date.now(); // it may still land and take over
    if (handshake || ws.readyState === WebSocket.CONNECTING) {
      ws.onclose = null;
      try { ws.close(1000); } catch { /* already closing */ }
      return;
    }
    let timer;
    const release = () => { clearTimeout(timer); this._abandoned.delete(ws); };
    this._abandoned.set(ws, release);
    ws.onclose = release;
    timer = setTimeout(() => { release(); try { ws.close(); } catch { /* gone */ } }, 60000);
  }

  /** The connection is gone or unusable: reconnect. */
  _lost(reason, handshake) {
    const flapped = this._live && Date.now() - this._liveAt < 10000;
    const wasLive = this._live;
    this._dropSocket(handshake);
    if (wasLive && !flapped) this._attempt = 0;
    this._retry(reason);
  }

  _retry(reason) {
    if (!this._wanted) return;
    this._why = reason;
    const n = this._attempt++;
    const base = Math.min(this.opts.backoffMax, this.opts.backoffMin * 2 ** n);
    const delay = n === 0 ? Math.random() * this.opts.backoffMin : base / 2 + (Math.random() * base) / 2;
    const retryAt = Date.now() + delay;
    this._setState("reconnecting", { reason, retryAt });
    this._later("retry", delay, () => this._open());
  }

  _stop(state, extra) {
    this._wanted = false;
    this._dropSocket(true);
    this._clear("retry");
    this._setState(state, extra);
  }

  _onClose(code, reason) {
    const err = this._lastError;
    const wasLive = this._live;
    const inflight = this._inflight && this.outbox.get(this._inflight.id);
    this._inflightAt = this._inflight ? this._inflight.at : 0;
    this._ws = null; // the socket is closed already: nothing to drop
    this._live = false;
    const sessionOnSocket = this._sessionOnSocket;
    this._dropSocket(true);
    const why = `closed ${code}${reason ? " " + reason : ""}`;
    if (this._completed) {
      this._completed = false;
      return this._stop("offline", { reason: "completed", code });
    }
    if (code === 1009) {
      // The frame the server could not take is the send in flight (one at a time).
      if (inflight) {
        const size = bytes(this._frame(inflight));
        this.maxFrame = Math.min(this.maxFrame, size - 1);
        this._refuse(inflight, "too_large", `the message (${size} bytes) is over the server's frame limit`);
      }
      this._attempt = Math.max(this._attempt, 1); // no tight loop even if the culprit was something else
      return this._retry(why);
    }
    if (code === 4001) {
      if (!sessionOnSocket || Date.now() - (this._gaveUpHelloAt || 0) < 30000) {
        this._gaveUpHelloAt = 0; // our own abandoned attempt took over: once
        return this._retry(why);
      }
      return this._stop("offline", { reason: "superseded", code });
    }
    if (code === 4003 || (err && err.code === "reauth_required")) {
      this._emit("auth", { need: "login", message: (err && err.message) || reason });
      return this._stop("offline", { reason: "reauth_required", code });
    }
    if (code === 1008 && err && err.code === "unauthorized") {
      this._token = null;
      this._emit("auth", { need: "token", message: err.message });
      if (typeof this.opts.token === "function" && ++this._authFailures < 3) return this._retry("token refused: " + err.message);
      return this._stop("offline", { reason: "unauthorized", code, message: err.message });
    }
    if (code === 1008 || FATAL_CLOSE[code]) {
      const message = (err && err.message) || FATAL_CLOSE[code] || reason || "refused by the server";
      this._emit("error", { code: (err && err.code) || "closed", message, fatal: true });
      return this._stop("offline", { reason: "error", code, message });
    }
    if (inflight && Date.now() - this._inflightAt < 2000 && ++inflight.strikes >= 3) {
      // The connection broke right after this send, three times running: a
      // send the server cannot take (a 1009 that reached us as 1006, say).
      this._refuse(inflight, "failed", "the connection broke right after sending this message, three times; it is not sent again");
    }
    if (wasLive && Date.now() - this._liveAt >= 10000) this._attempt = 0;
    this._retry(why);
  }

  // ---- heartbeat and ack watchdog ---------------------------------------

  /** One timer: ping after silence, give up without an answer, give up on an unacked send. */
  _watch() {
    this._clear("watch");
    if (!this._live) return;
    const now = Date.now();
    let next;
    if (this._pingAt && this._lastRx < this._pingAt) {
      if (now - this._pingAt >= this.opts.pongTimeout) return this._lost("no answer to ping: connection lost", false);
      next = this._pingAt + this.opts.pongTimeout;
    } else if (now - this._lastRx >= this.opts.pingAfter) {
      this._pingAt = now;
      this._ws.send(JSON.stringify({ type: "ping", id: "h-" + ++this._pingN }));
      next = now + this.opts.pongTimeout;
    } else {
      next = this._lastRx + this.opts.pingAfter;
    }
    if (this._inflight) {
      const due = this._inflight.at + this.opts.ackTimeout;
      if (now >= due) return this._lost("a message was not acknowledged in time", false);
      next = Math.min(next, due);
    }
    this._later("watch", next - now + 1, () => this._watch());
  }

  // ---- frames -------------------------------------------------------------

  _onFrame(f) {
    switch (f.type) {
      case "session": return this._onSession(f);
      case "history_batch": return this._onBatch(f);
      case "message": return this._onEntry(f, "live");
      case "ack": return this._onAck(f);
      case "delta": return this._onDelta(f);
      case "error": return this._onError(f);
      case "context": return this._emit("context", { context: f.context });
      case "completed":
        this._completed = true;
        this.sessionId = null;
        this.lastSeq = 0;
        this._persist();
        return this._emit("completed", { sessionId: f.session_id });
      default: // pong, and frame types added later
    }
  }

  _onSession(f) {
    this._clear("connect");
    this._sessionOnSocket = true;
    if (this._resumeFrom !== null && !f.resumed) {
      // The server made a new session for us; the user decides (newSession()).
      const old = this.sessionId;
      this._wanted = false;
      this.sessionId = null;
      this.lastSeq = 0;
      this._dropSocket(true);
      for (const o of this.outbox.values()) this._refuse(o, "expired", "not sent: the session could not be resumed");
      this._persist();
      return this._setState("expired", { reason: f.reason, sessionId: old });
    }
    this._live = true;
    this._everLive = true;
    this._liveAt = Date.now();
    this._authFailures = 0;
    this._pingAt = 0;
    this.sessionId = f.session_id;
    if (!f.resumed) {
      this.lastSeq = 0;
      this.holes = [];
      this.seen.clear();
    }
    this._expectReplay = !!f.resumed;
    this._persist();
    this._emit("session", f);
    this._setTool(f.pending_tool_call || null);
    this._liveInfo = { resumed: !!f.resumed, reason: f.reason };
    this._closeAbandoned();
    this._setState("live", this._liveInfo);
    this._watch();
    if (!f.resumed) this._flush();
  }

  /**
   * Closes the sockets drop() abandoned, now that a new one is live: the
   * server learnt nothing from the drop, and with a shared attach it keeps
   * an abandoned socket attached until it closes.
   */
  _closeAbandoned() {
    for (const [ws, release] of this._abandoned) {
      release();
      ws.onclose = null;
      try { ws.close(1000); } catch { /* gone */ }
    }
  }

  _onBatch(f) {
    const msgs = f.messages || [];
    if (this._expectReplay) {
      this._expectReplay = false;
      // Entries the batch omitted become a hole in _onEntry, paged below.
      for (const m of msgs) this._onEntry(m, "replay", true);
      this._liveInfo = { resumed: true, reason: "resumed", missed: msgs.length + (f.omitted || 0), summary: f.summary };
      this._setState("live", this._liveInfo);
      this._flush();
      return this._pageHistory();
    }
    const asked = this._historyAsked;
    this._historyAsked = null;
    const before = this._missingCount();
    for (const m of msgs) this._onEntry(m, "history", true);
    // An answer that fills nothing of what was asked: that range cannot come, stop asking.
    if (asked && this._missingCount() === before) this._removeRange(asked[0], asked[1], true);
    this._pageHistory();
  }

  _addHole(a, b) {
    this.holes.push([a, b]);
    this.holes.sort((x, y) => x[0] - y[0]);
  }

  /** Marks seqs a..b as no longer missing (given up on when lostForGood). */
  _removeRange(a, b, lostForGood) {
    const out = [];
    for (const [x, y] of this.holes) {
      if (y < a || x > b) out.push([x, y]);
      else {
        if (x < a) out.push([x, a - 1]);
        if (y > b) out.push([b + 1, y]);
      }
    }
    this.holes = out;
    if (lostForGood) this._emit("error", { code: "history", message: `entries ${a}–${b} could not be fetched` });
  }

  _pageHistory() {
    if (!this._live || this._expectReplay || this._historyAsked) return;
    if (!this.holes.length) {
      if (this._liveInfo.loading) this._setState("live", (this._liveInfo = { ...this._liveInfo, loading: false }));
      return this._emit("synced", { lastSeq: this.lastSeq });
    }
    const [a, b] = this.holes[this.holes.length - 1]; // newest first: the page fills upwards
    const limit = Math.min(this.opts.historyPage, b - a + 1);
    this._historyAsked = [Math.max(a, b - limit + 1), b];
    this._write({ type: "history", before_seq: b + 1, limit });
    this._liveInfo = { ...this._liveInfo, loading: true };
    this._setState("live", this._liveInfo);
  }

  _onEntry(m, source, batched) {
    const seq = m.seq;
    if (!Number.isInteger(seq) || seq < 1 || this.seen.has(seq)) return; // duplicate
    if (seq > this.lastSeq + 1 && !batched) {
      // A gap in the live stream: resume from what we hold; the server replays the rest.
      return this._lost(`gap: expected seq ${this.lastSeq + 1}, got ${seq}`, true);
    }
    if (seq <= this.lastSeq) {
      if (!this.holes.some(([a, b]) => seq >= a && seq <= b)) return; // already delivered before a reload
      this._removeRange(seq, seq, false);
    } else {
      if (batched && seq > this.lastSeq + 1) this._addHole(this.lastSeq + 1, seq - 1);
      this.lastSeq = seq;
    }
    this.seen.add(seq);
    const md = m.metadata || {};
    const o = md.id && this.outbox.get(md.id);
    if (o) {
      this.outbox.delete(o.id);
      if (this._inflight && this._inflight.id === o.id) this._inflight = null;
      this._emit("send", { id: o.id, content: o.content, status: "acked", seq });
    }
    if (this.stream && this.stream.seq === seq) this.stream = null;
    if (m.role === "tool" && source !== "history") {
      const known = this.tool && this.tool.call_id === md.call_id; // the session frame's pending_tool_call has more
      const waits = md.status === "awaiting_approval";
      if ((md.status === "started" || waits) && !(known && this.tool.status === md.status)) {
        this._setTool({ call_id: md.call_id, name: md.name, args: md.args ?? (known ? this.tool.args : undefined), status: md.status, started_seq: seq });
      } else if (md.status !== "started" && !waits && known) this._setTool(null);
    }
    this._emit("entry", { seq, role: m.role, content: m.content, timestamp: m.timestamp, metadata: md, source });
    this._persist();
    if (o) this._flush();
  }

  _setTool(running) {
    this.tool = running;
    this._emit("tool", { running });
  }

  _onAck(f) {
    const o = this.outbox.get(f.id);
    if (this._inflight && this._inflight.id === f.id) this._inflight = null;
    if (o) {
      this.outbox.delete(f.id);
      this._emit("send", { id: o.id, content: o.content, status: "acked", seq: f.seq });
      this._persist();
    }
    this._watch();
    this._flush();
  }

  _onError(f) {
    this._emit("error", { code: f.code, message: f.message, id: f.id });
    const o = f.id && this.outbox.get(f.id);
    if (!o) {
      this._lastError = f; // explains the close that follows (unauthorized, reauth_required, …)
      if (this._historyAsked && f.code === "bad_request") {
        this._removeRange(this._historyAsked[0], this._historyAsked[1], true);
        this._historyAsked = null;
      }
      return;
    }
    if (this._inflight && this._inflight.id === f.id) this._inflight = null;
    if (f.code === "too_large" || f.code === "bad_request" || (f.code !== "rate_limited" && ++o.errors > 5)) {
      this._refuse(o, f.code, f.message);
    } else {
      // rate_limited (or a passing server error): the same id again after a pause.
      o.pauses = (o.pauses || 0) + 1;
      const pause = Math.min(8000, 1000 * 2 ** (o.pauses - 1));
      o.retryAt = Date.now() + pause / 2 + (Math.random() * pause) / 2;
      this._emit("send", { id: o.id, content: o.content, status: "pending", code: f.code, retryAt: o.retryAt });
    }
    this._watch();
    this._flush();
  }

  _onDelta(d) {
    if (d.seq <= this.lastSeq || this.seen.has(d.seq) || typeof d.text !== "string") return;
    const first = Number.isInteger(d.from) ? d.from : d.part;
    const s = this.stream;
    if (first === 0) {
      this.stream = { seq: d.seq, part: d.part, text: d.text }; // a catch-up from 0 replaces what was held
    } else if (s && s.seq === d.seq && first === s.part + 1) {
      s.part = d.part;
      s.text += d.text;
    } else if (s && s.seq === d.seq && d.part <= s.part) {
      return; // parts already held
    } else {
      // Parts are missing: reconnect; hello.stream names what we hold, the server continues from there.
      return this._lost(`stream gap at seq ${d.seq}: part ${first} after ${s && s.seq === d.seq ? s.part : "none"}`, true);
    }
    this._emit("delta", { seq: d.seq, part: this.stream.part, text: this.stream.text });
  }

  /** Sends the oldest queued message, if none is awaiting its ack. */
  _flush() {
    this._clear("send");
    if (!this._live || this._expectReplay || this._inflight) return;
    const o = this.outbox.values().next().value;
    if (!o) return;
    const wait = o.retryAt - Date.now();
    if (wait > 0) return this._later("send", wait, () => this._flush());
    const frame = this._frame(o);
    if (bytes(frame) > this.maxFrame) {
      this._refuse(o, "too_large", `the message is ${bytes(frame)} bytes on the wire; the server takes at most ${this.maxFrame}`);
      return this._flush();
    }
    this._inflight = { id: o.id, at: Date.now() };
    this._ws.send(frame);
    this._watch();
  }
}

export default Tether;
