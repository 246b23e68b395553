/**
 * tether-ai.js — a ChatTransport for the Vercel AI SDK (`ai` 7.x: `useChat`,
 * `Chat`) over Tether. An ES module with no build step, built on tether.js;
 * every Tether node serves it at /tether-ai.js, next to /tether.js.
 *
 * @example
 *   import { useChat } from "@ai-sdk/react";
 *   import { TetherChatTransport } from "https://tether.example/tether-ai.js";
 *   const transport = new TetherChatTransport({ token: async (chatId) => myLogin() });
 *   const { messages, sendMessage, stop } = useChat({ id: chatId, transport, resume: true, messages: saved });
 *
 * What it does, in the AI SDK's terms:
 * - One Tether session per chat id, one connection per chat. The chat id ->
 *   session mapping (and what is needed to resume after a reload) is kept in
 *   `storage` (default: localStorage when there is one, else memory) under
 *   "tether-ai:<chatId>". Tether picks session ids; a chat id is the SDK's.
 * - `sendMessages` sends the last (user) message with the SDK message id as
 *   the send id, so a retry is stored once, and returns a ReadableStream of
 *   UI message chunks for the turn that answers it: `start` (messageId
 *   "a-<user message id>"), `start-step`, tool entries as dynamic tool parts
 *   run by the server (`tool-input-available` / `tool-output-available` /
 *   `tool-output-error` / `tool-output-denied`, providerExecuted), the
 *   streamed reply (`delta` frames) as `text-start` / `text-delta` /
 *   `text-end`, then `finish-step` and `finish`. A dropped connection does not
 *   end the stream: tether.js reconnects, resumes from the last seq and the
 *   part held (hello.stream), and the stream goes on with the next word.
 * - `reconnectToStream` (useChat's `resume: true`, `chat.resumeStream()`, a
 *   new `Chat` after a reload) returns null when no turn is unfinished, else
 *   a stream for that turn. The SDK builds a resumed message anew from the
 *   stream (it keeps no parts of it), so this transport declares
 *   `resumeStreamIsReplay` and the stream starts with the parts the client
 *   already holds — from memory or storage, in one go, not from the network
 *   — then continues with what the server sends after them: the network
 *   carries no part twice and every word is in the message once.
 * - The turn ends at its agent (or system) entry. A reply cut by a tool call
 *   is also logged as an agent entry, with the tool entry right behind it in
 *   the same write, so the turn is taken as over `turnEndDelay` ms (50) after
 *   such an entry when nothing of the turn followed.
 * - An agent error (a system entry of the turn) ends the stream with an
 *   `error` chunk; a refused send, an expired session, a refused token end
 *   it with an error.
 * - `stop()` (the abort signal) closes the stream and sends PROTOCOL.md's
 *   `cancel` with `reply_to` the turn's user entry (`cancelOnStop`, default
 *   true; once live if the connection is down, once acked if the send is
 *   not yet). The server stops the turn and logs the text streamed so far
 *   as its agent entry with `metadata.cancelled: true` (or a system entry
 *   "cancelled" when nothing was streamed; a running tool call is logged
 *   failed "cancelled"); turns queued behind it still run. A dropped
 *   connection is not a stop: it cancels nothing. A server that predates
 *   `cancel` answers `error` bad_request and keeps the connection: that
 *   answer is ignored, the turn then runs on on the server and its later
 *   parts are not added to the stopped message. Note that useChat calls
 *   stop() when the component unmounts (`cancelOnStop: false` keeps the
 *   server's turn running then).
 * - `regenerate` is not supported (a Tether log is append-only): it fails.
 *
 * Options: url (default: ws(s)://<host that served this module>/v1/ws),
 * token (a JWT, or (chatId) => JWT | Promise), storage ({getItem, setItem,
 * removeItem}), cancelOnStop, turnEndDelay, tether (more tether.js options).
 *
 * @module tether-ai
 */

import { Tether } from "./tether.js";

const KEY = "tether-ai:";

function memoryStorage() {
  const m = new Map();
  return { getItem: (k) => (m.has(k) ? m.get(k) : null), setItem: (k, v) => m.set(k, String(v)), removeItem: (k) => m.delete(k) };
}

/** The WebSocket URL of the node that served this module, if it came over http(s). */
function defaultUrl() {
  try {
    const u = new URL("/v1/ws", import.meta.url);
    if (u.protocol !== "http:" && u.protocol !== "https:") return "";
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    return u.href;
  } catch {
    return "";
  }
}

/** The text of a UI message (its text parts joined). */
function messageText(m) {
  return (m.parts || []).filter((p) => p.type === "text").map((p) => p.text).join("");
}

export class TetherChatTransport {
  constructor(options = {}) {
    this.opts = { url: "", token: null, storage: null, cancelOnStop: true, turnEndDelay: 50, tether: {}, ...options };
    if (!this.opts.url) this.opts.url = defaultUrl();
    if (!this.opts.url) throw new Error("tether-ai: no url given (ws://host/v1/ws) and none to derive from where the module was loaded");
    if (!this.opts.token) throw new Error("tether-ai: no token given (a JWT, or a function (chatId) => JWT)");
    this.storage = this.opts.storage || (typeof localStorage !== "undefined" ? localStorage : memoryStorage());
    /** @type {Map<string, ChatLink>} */
    this._chats = new Map();
  }

  /** Resumed streams start with what the client holds: the SDK must reset the message first. */
  get resumeStreamIsReplay() {
    return true;
  }

  async sendMessages({ chatId, messages, abortSignal, trigger }) {
    if (trigger === "regenerate-message") {
      throw new Error("tether-ai: regenerate is not supported (a Tether session's log is append-only); send a new message");
    }
    const last = messages[messages.length - 1];
    if (!last || last.role !== "user") throw new Error("tether-ai: the last message to send is not a user message");
    return this._link(chatId).submit(last.id, messageText(last), abortSignal);
  }

  async reconnectToStream({ chatId, abortSignal }) {
    const link = this._chats.get(chatId) || (this.storage.getItem(KEY + chatId) ? this._link(chatId) : null);
    if (!link || !link.turn || link.turn.delivered) return null;
    return link.stream(abortSignal);
  }

  /** The Tether client of a chat (events, drop(), state), made on first use. */
  tether(chatId) {
    return this._link(chatId).tether;
  }

  /** The Tether session id of a chat, or null before its first message. */
  sessionId(chatId) {
    const link = this._chats.get(chatId);
    if (link) return link.tether.sessionId;
    const rec = load(this.storage, KEY + chatId);
    return (rec && rec.session && rec.session.sessionId) || null;
  }

  /** Closes the chat's connection and forgets its session (storage too). */
  forget(chatId) {
    const link = this._chats.get(chatId);
    if (link) link.close();
    this._chats.delete(chatId);
    try { this.storage.removeItem(KEY + chatId); } catch { /* storage unavailable */ }
  }

  /** Closes every connection; sessions stay resumable (AbstractChat.dispose calls this). */
  close() {
    for (const link of this._chats.values()) link.close();
    this._chats.clear();
  }

  _link(chatId) {
    let link = this._chats.get(chatId);
    if (!link) {
      link = new ChatLink(this, chatId);
      this._chats.set(chatId, link);
    }
    return link;
  }
}

function load(storage, key) {
  try {
    const rec = JSON.parse(storage.getItem(key) || "null");
    return rec && typeof rec === "object" ? rec : null;
  } catch {
    return null;
  }
}

/**
 * One chat: its Tether client, the turn the SDK waits on (what it holds, so
 * a resumed stream can rebuild the message) and the stream attached to it.
 *
 * turn: {id, seq, messageId, parts, endAt, done, delivered, stopped?, error?}
 *   id: the user message (= send) id; seq: its entry's seq once acked;
 *   parts: [{type: "text", seq, text, done} | {type: "tool", callId, name, args, status, result}];
 *   endAt: seq of the agent/system entry that may end it; done: ended;
 *   delivered: the SDK has it all (a stream closed on it, or stopped).
 */
class ChatLink {
  constructor(transport, chatId) {
    this.t = transport;
    this.key = KEY + chatId;
    const rec = load(transport.storage, this.key);
    this.turn = (rec && rec.turn) || null;
    this.sink = null;
    this.pendingCancel = (rec && rec.pendingCancel) || null;
    this._endTimer = null;
    const o = transport.opts;
    const token = typeof o.token === "function" ? () => o.token(chatId) : o.token;
    const state = rec && rec.session ? { ...rec.session, stream: rec.stream } : null;
    this.tether = new Tether({ ...o.tether, url: o.url, token, state, history: "missed" });
    const tt = this.tether;
    tt.on("persist", () => this.save());
    tt.on("send", (s) => this.onSend(s));
    tt.on("entry", (e) => this.onEntry(e));
    tt.on("delta", (d) => this.onDelta(d));
    tt.on("state", (s) => this.onState(s));
    tt.on("synced", () => this.scheduleEnd());
    tt.on("error", (e) => {
      // A server without `cancel` calls it an unknown frame type; the connection stays. Nothing else to do.
      if (e.fatal) this.fail(new Error(`tether: ${e.message}`));
    });
  }

  save() {
    const rec = { session: this.tether.persisted, stream: this.tether.stream, turn: this.turn, pendingCancel: this.pendingCancel };
    try { this.t.storage.setItem(this.key, JSON.stringify(rec)); } catch { /* full or unavailable: resume after a reload may start over */ }
  }

  /** Starts the turn answering user message id (or re-attaches to it: a retry) and returns its stream. */
  submit(id, content, abortSignal) {
    if (!this.turn || this.turn.id !== id || this.turn.delivered) {
      this.turn = { id, seq: 0, messageId: "a-" + id, parts: [], endAt: 0, done: false, delivered: false };
    }
    const stream = this.stream(abortSignal); // connects; after "expired" that starts a new session
    this.tether.send(content, undefined, { id });
    this.save();
    return stream;
  }

  /** A ReadableStream of UI message chunks for the current turn; the newest stream takes over. */
  stream(abortSignal) {
    let sink;
    const rs = new ReadableStream({
      start: (controller) => {
        if (this.sink) this.closeSink(this.sink);
        sink = this.sink = { controller, started: false, text: new Map(), tools: new Map(), closed: false };
      },
      cancel: () => {
        sink.closed = true;
        if (this.sink === sink) this.sink = null;
      },
    });
    if (abortSignal) {
      if (abortSignal.aborted) this.stop(sink);
      else abortSignal.addEventListener("abort", () => this.stop(sink), { once: true });
    }
    this.tether.connect();
    this.sync();
    this.scheduleEnd();
    return rs;
  }

  closeSink(sink, err) {
    if (this.sink === sink) this.sink = null;
    if (sink.closed) return;
    sink.closed = true;
    try {
      if (err) sink.controller.error(err);
      else sink.controller.close();
    } catch { /* the reader went away */ }
  }

  /** The SDK stopped (stop() or its abort signal): close the stream, cancel the turn on the server. */
  stop(sink) {
    if (!sink || sink.closed) return;
    this.closeSink(sink);
    const turn = this.turn;
    if (!turn || turn.done) return;
    turn.done = turn.delivered = turn.stopped = true;
    clearTimeout(this._endTimer);
    if (this.t.opts.cancelOnStop) this.pendingCancel = { id: turn.id, seq: turn.seq };
    this.flushCancel();
    this.save();
  }

  flushCancel() {
    const c = this.pendingCancel;
    if (!c || !c.seq || !this.tether.cancel(c.seq)) return; // not acked yet, or not live: later
    this.pendingCancel = null;
    this.save();
  }

  /** The turn failed for good: end its stream with err. */
  fail(err) {
    const turn = this.turn;
    if (!turn || turn.done) return;
    turn.done = turn.delivered = true;
    clearTimeout(this._endTimer);
    if (this.sink) this.closeSink(this.sink, err);
    this.save();
  }

  onSend(s) {
    if (this.pendingCancel && s.id === this.pendingCancel.id && s.status === "acked") {
      this.pendingCancel.seq = s.seq;
      this.flushCancel();
    }
    const turn = this.turn;
    if (!turn || s.id !== turn.id) return;
    if (s.status === "acked" && s.seq) {
      if (!turn.seq && s.seq <= this.tether.lastSeq) {
        // The server had this id already (the same ack again) and its turn was delivered before.
        return this.fail(new Error(`tether-ai: message ${s.id} was sent and answered before (entry ${s.seq}); send a new message`));
      }
      turn.seq = s.seq;
    }
    if (s.status === "refused") this.fail(new Error(`tether: the message was refused (${s.code}): ${s.message}`));
  }

  onState(s) {
    if (s.state === "live") this.flushCancel();
    else if (s.state === "expired") this.fail(new Error(`tether: the session could not be resumed (${s.reason})`));
    else if (s.state === "offline" && s.reason !== "closed") this.fail(new Error(`tether: offline (${s.reason}${s.message ? ": " + s.message : ""})`));
  }

  onEntry(e) {
    const turn = this.turn;
    if (!turn || turn.done || e.source === "history") return;
    const md = e.metadata || {};
    if (e.role === "user") {
      if (md.id === turn.id) turn.seq = e.seq;
      return;
    }
    if (!turn.seq || md.reply_to !== turn.seq) return; // another turn's
    clearTimeout(this._endTimer);
    turn.endAt = 0;
    if (e.role === "tool") {
      let p = turn.parts.find((x) => x.type === "tool" && x.callId === md.call_id);
      if (!p) turn.parts.push((p = { type: "tool", callId: md.call_id, name: md.name, args: md.args ?? {}, status: md.status }));
      if (md.args !== undefined) p.args = md.args;
      p.status = md.status;
      if ("result" in md) p.result = md.result;
      else if (md.status === "failed") p.result = e.content;
    } else if (e.role === "agent") {
      this.setText(e.seq, e.content, true);
      turn.endAt = e.seq;
    } else if (e.role === "system") {
      if (!md.cancelled) turn.error = e.content;
      turn.endAt = e.seq;
    }
    this.save();
    this.sync();
    this.scheduleEnd();
  }

  onDelta(d) {
    const turn = this.turn;
    if (!turn || turn.done || !turn.seq || d.seq <= turn.seq) return;
    if (turn.endAt && d.seq > turn.endAt) return; // the next turn's reply
    this.setText(d.seq, d.text, false);
    this.save();
    this.sync();
  }

  setText(seq, text, done) {
    const p = this.turn.parts.find((x) => x.type === "text" && x.seq === seq);
    if (p) {
      p.text = text;
      p.done = p.done || done;
    } else {
      this.turn.parts.push({ type: "text", seq, text, done });
    }
  }

  /** An agent/system entry may end the turn: end it unless more of it comes right behind. */
  scheduleEnd() {
    const turn = this.turn;
    if (!turn || turn.done || !turn.endAt || this._endTimer) return;
    this._endTimer = setTimeout(() => {
      this._endTimer = null;
      if (this.turn !== turn || turn.done || !turn.endAt) return;
      turn.done = true;
      this.sync();
      this.save();
    }, this.t.opts.turnEndDelay);
  }

  /** Writes to the attached stream what of the turn it has not had yet. */
  sync() {
    const s = this.sink;
    const turn = this.turn;
    if (!s || s.closed || !turn) return;
    const out = [];
    if (!s.started) {
      s.started = true;
      out.push({ type: "start", messageId: turn.messageId }, { type: "start-step" });
    }
    // A reply that is no longer an extension of what was written (the turn
    // ran again after a server crash: its parts restart from 0): write the step anew.
    if (turn.parts.some((p) => p.type === "text" && s.text.has(p.seq) && !p.text.startsWith(s.text.get(p.seq).text))) {
      out.push({ type: "reset-step" }, { type: "start-step" });
      s.text.clear();
      s.tools.clear();
    }
    for (const p of turn.parts) {
      if (p.type === "text") writeText(s, p, out);
      else writeTool(s, p, out);
    }
    if (turn.done) {
      for (const [seq, e] of s.text) if (!e.ended) out.push({ type: "text-end", id: "t" + seq });
      out.push({ type: "finish-step" });
      out.push(turn.error ? { type: "error", errorText: turn.error } : { type: "finish", finishReason: "stop" });
    }
    try {
      for (const c of out) s.controller.enqueue(c);
    } catch { /* the reader went away */ }
    if (turn.done) {
      turn.delivered = true;
      this.closeSink(s);
      this.save();
    }
  }

  close() {
    clearTimeout(this._endTimer);
    this._endTimer = null;
    if (this.sink) this.closeSink(this.sink);
    this.tether.close();
  }
}

function writeText(s, p, out) {
  if (!p.text) return;
  const id = "t" + p.seq;
  let e = s.text.get(p.seq);
  if (!e) {
    s.text.set(p.seq, (e = { text: "", ended: false }));
    out.push({ type: "text-start", id });
  }
  if (p.text.length > e.text.length) {
    out.push({ type: "text-delta", id, delta: p.text.slice(e.text.length) });
    e.text = p.text;
  }
  if (p.done && !e.ended) {
    e.ended = true;
    out.push({ type: "text-end", id });
  }
}

function writeTool(s, p, out) {
  const base = { toolCallId: p.callId, providerExecuted: true, dynamic: true };
  let w = s.tools.get(p.callId);
  if (!w) {
    s.tools.set(p.callId, (w = "input"));
    out.push({ type: "tool-input-available", ...base, toolName: p.name, input: p.args ?? {} });
  }
  if (w !== "input") return;
  if (p.status === "completed") {
    out.push({ type: "tool-output-available", ...base, output: p.result });
  } else if (p.status === "failed") {
    out.push({ type: "tool-output-error", ...base, errorText: String(p.result ?? "failed") });
  } else if (p.status === "denied") {
    out.push({ type: "tool-output-denied", toolCallId: p.callId });
  } else {
    return;
  }
  s.tools.set(p.callId, "output");
}

export default TetherChatTransport;
