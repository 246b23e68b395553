// The AI SDK transport (tether-ai.js) with the real `ai` and `@ai-sdk/react`
// packages against a real `tether serve --agent demo` whose replies stream
// word by word. Run by TestAISDKNode (aisdk_test.go), which starts the node
// and passes its address in TETHER_URL; runnable by hand too:
//   TETHER_URL=http://127.0.0.1:8080 node --experimental-websocket --test tether-ai.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Chat } from "@ai-sdk/react";
import { TetherChatTransport } from "./tether-ai.js";

const base = process.env.TETHER_URL;
if (!base) throw new Error("TETHER_URL (http://host:port of a `tether serve --dev-tokens --agent demo`) is not set");
const wsURL = base.replace(/^http/, "ws") + "/v1/ws";
if (typeof WebSocket === "undefined") throw new Error("no global WebSocket: run node 22+, or node 20 with --experimental-websocket");

// Every frame each socket sends and receives, to check what crossed the
// network (a recorder around the real WebSocket, not a stand-in for it).
const frames = []; // {dir: "in"|"out", f, ws}: ws.sid is the session the socket is on
const RealWebSocket = globalThis.WebSocket;
globalThis.WebSocket = class extends RealWebSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener("message", (ev) => {
      const f = JSON.parse(ev.data);
      if (f.type === "session") this.sid = f.session_id;
      frames.push({ dir: "in", f, ws: this });
    });
  }
  send(data) {
    const f = JSON.parse(data);
    if (f.type === "hello" && f.session_id) this.sid = f.session_id;
    frames.push({ dir: "out", f, ws: this });
    super.send(data);
  }
};

async function devToken(user) {
  const r = await fetch(base + "/dev/token", { method: "POST", body: JSON.stringify({ user }) });
  assert.equal(r.status, 200, "POST /dev/token");
  return (await r.json()).token;
}

async function stored(token, sessionId) {
  const r = await fetch(`${base}/v1/sessions/${sessionId}`, { headers: { Authorization: "Bearer " + token } });
  assert.equal(r.status, 200, "GET /v1/sessions/" + sessionId);
  return (await r.json()).messages;
}

async function waitFor(what, cond, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A user, its transport (over storage) and a way to make Chats that record the assistant text as it grows. */
async function setup(storage) {
  const user = "u" + randomUUID().slice(0, 8);
  const token = await devToken(user);
  const transport = new TetherChatTransport({ url: wsURL, token: async () => token, storage, tether: { backoffMin: 50 } });
  return { token, transport };
}

function watch(chat) {
  const seen = []; // the assistant text each time it changed
  chat["~registerMessagesCallback"](() => {
    const a = chat.messages.findLast((m) => m.role === "assistant");
    const t = a ? textOf(a) : "";
    if (seen[seen.length - 1] !== t) seen.push(t);
  });
  return seen;
}

const textOf = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
const words = (s) => s.split(" ").filter(Boolean).length;

/** Each text seen is a prefix of the next and of the final one: nothing shown twice, nothing taken back. */
function assertGrew(seen, final) {
  const nonEmpty = seen.filter(Boolean);
  for (let i = 0; i < nonEmpty.length; i++) {
    assert.ok(final.startsWith(nonEmpty[i]), `shown ${JSON.stringify(nonEmpty[i])}, not a prefix of the reply ${JSON.stringify(final)}`);
    if (i > 0) assert.ok(nonEmpty[i].startsWith(nonEmpty[i - 1]), `shown ${JSON.stringify(nonEmpty[i])} after ${JSON.stringify(nonEmpty[i - 1])}`);
  }
}

/** The agent entry answering the user message with send id. */
async function storedReply(token, sessionId, id) {
  return waitFor("the stored reply", async () => {
    const ms = await stored(token, sessionId);
    const u = ms.find((m) => m.role === "user" && m.metadata.id === id);
    return u && ms.find((m) => m.role === "agent" && m.metadata.reply_to === u.seq);
  });
}

/** The delta parts of session sid's entry seq received, as [from, part] ranges, in order. */
function partsReceived(sid, seq) {
  return frames.filter((x) => x.dir === "in" && x.ws.sid === sid && x.f.type === "delta" && x.f.seq === seq).map((x) => [x.f.from ?? x.f.part, x.f.part]);
}

function assertNoPartTwice(ranges) {
  for (let i = 1; i < ranges.length; i++) {
    assert.equal(ranges[i][0], ranges[i - 1][1] + 1, `parts received ${JSON.stringify(ranges)}: a part came twice or went missing`);
  }
}

test("a streamed demo reply arrives as the SDK assembles it", async () => {
  const { token, transport } = await setup();
  const chat = new Chat({ id: randomUUID(), transport });
  const seen = watch(chat);
  await chat.sendMessage({ text: "compare two laptops" });
  assert.equal(chat.status, "ready");
  assert.equal(chat.error, undefined);
  const [u, a] = chat.messages;
  assert.equal(chat.messages.length, 2);
  assert.equal(a.role, "assistant");
  assert.equal(a.id, "a-" + u.id);
  const reply = await storedReply(token, transport.sessionId(chat.id), u.id);
  assert.equal(textOf(a), reply.content);
  const tools = a.parts.filter((p) => p.type === "dynamic-tool");
  assert.equal(tools.length, 1, JSON.stringify(a.parts));
  assert.equal(tools[0].toolName, "search");
  assert.equal(tools[0].state, "output-available");
  assert.deepEqual(tools[0].input, { query: "compare two laptops" });
  assert.match(String(tools[0].output), /Found 3 results/);
  assert.ok(seen.filter(Boolean).length >= 3, `the reply grew in ${seen.length} steps: ${JSON.stringify(seen)}`);
  assertGrew(seen, reply.content);
  const ms = await stored(token, transport.sessionId(chat.id));
  assert.equal(ms.filter((m) => m.role === "user" && m.metadata.id === u.id).length, 1);
  transport.close();
});

test("a message sent twice with its id (a retry) is stored once and answered once", async () => {
  const { token, transport } = await setup();
  const chatId = randomUUID();
  const msg = { id: randomUUID(), role: "user", parts: [{ type: "text", text: "retry me" }] };
  const opts = { chatId, messages: [msg], trigger: "submit-message", messageId: undefined, abortSignal: undefined };
  const first = await transport.sendMessages(opts);
  const second = await transport.sendMessages(opts); // takes over the first stream
  const chunks = [];
  for await (const c of second) chunks.push(c);
  assert.equal(chunks[0].type, "start");
  assert.equal(chunks.at(-1).type, "finish");
  const text = chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
  const reply = await storedReply(token, transport.sessionId(chatId), msg.id);
  assert.equal(text, reply.content);
  const ms = await stored(token, transport.sessionId(chatId));
  assert.equal(ms.filter((m) => m.role === "user").length, 1, "the user message was stored more than once");
  assert.equal(ms.filter((m) => m.role === "agent").length, 1);
  await first.cancel().catch(() => {});
  transport.close();
});

test("a connection dropped mid-reply: the reply goes on after the reconnect, every word once", async () => {
  const { token, transport } = await setup();
  const chat = new Chat({ id: randomUUID(), transport });
  const seen = watch(chat);
  const states = [];
  transport.tether(chat.id).on("state", (s) => states.push(s.state));
  const done = chat.sendMessage({ text: "drop me halfway" });
  await waitFor("two words of the reply", () => words(seen.at(-1) || "") >= 2);
  const mark = frames.length;
  transport.tether(chat.id).drop();
  await done;
  assert.equal(chat.status, "ready");
  assert.ok(states.includes("reconnecting"), "no reconnect: " + states.join(" "));
  const [u, a] = chat.messages;
  const reply = await storedReply(token, transport.sessionId(chat.id), u.id);
  assert.equal(textOf(a), reply.content);
  assert.equal(chat.messages.length, 2);
  assertGrew(seen, reply.content);
  // After the reconnect the server went on after the parts held.
  const hello = frames.slice(mark).find((x) => x.dir === "out" && x.f.type === "hello");
  assert.ok(hello && hello.f.stream && hello.f.stream.seq === reply.seq, "the resume did not name the parts held: " + JSON.stringify(hello && hello.f));
  assertNoPartTwice(partsReceived(transport.sessionId(chat.id), reply.seq));
  transport.close();
});

test("reconnectToStream finishes the same message from the parts held after a drop", async () => {
  const { token, transport } = await setup();
  const id = randomUUID();
  const chat1 = new Chat({ id, transport });
  const seen1 = watch(chat1);
  chat1.sendMessage({ text: "resume me please" });
  await waitFor("two words of the reply", () => words(seen1.at(-1) || "") >= 2);
  transport.tether(id).drop();
  // The page's Chat is gone (a route change, say); a new one takes the messages so far and resumes.
  const held = structuredClone(chat1.messages);
  const heldText = textOf(held[1]);
  const chat2 = new Chat({ id, transport, messages: held });
  const seen2 = watch(chat2);
  await chat2.resumeStream();
  assert.equal(chat2.status, "ready");
  assert.equal(chat2.messages.length, 2, JSON.stringify(chat2.messages.map((m) => m.role)));
  const [u, a] = chat2.messages;
  assert.equal(a.id, held[1].id);
  const reply = await storedReply(token, transport.sessionId(id), u.id);
  assert.equal(textOf(a), reply.content);
  assert.equal(a.parts.filter((p) => p.type === "dynamic-tool").length, 1);
  assert.equal(a.parts.filter((p) => p.type === "text").length, 1);
  // Never from zero: the first text of the resumed message already holds what was shown.
  assert.ok(seen2.filter(Boolean)[0].startsWith(heldText), `resumed with ${JSON.stringify(seen2[0])}, held ${JSON.stringify(heldText)}`);
  assertGrew(seen2, reply.content);
  assertNoPartTwice(partsReceived(transport.sessionId(id), reply.seq));
  transport.close();
});

test("a reload (new transport and Chat from the stored messages) resumes without duplicates", async () => {
  const storage = new Map();
  const ls = { getItem: (k) => storage.get(k) ?? null, setItem: (k, v) => storage.set(k, v), removeItem: (k) => storage.delete(k) };
  const { token, transport } = await setup(ls);
  const id = randomUUID();
  const chat1 = new Chat({ id, transport });
  const seen1 = watch(chat1);
  chat1.sendMessage({ text: "reload me now" });
  await waitFor("three words of the reply", () => words(seen1.at(-1) || "") >= 3);
  const saved = JSON.parse(JSON.stringify(chat1.messages)); // what the app kept
  const mark = frames.length;
  transport.close(); // the page goes away

  const transport2 = new TetherChatTransport({ url: wsURL, token: async () => token, storage: ls });
  const chat2 = new Chat({ id, transport: transport2, messages: saved });
  const seen2 = watch(chat2);
  await chat2.resumeStream();
  assert.equal(chat2.status, "ready");
  assert.equal(chat2.error, undefined);
  assert.equal(chat2.messages.length, 2, JSON.stringify(chat2.messages.map((m) => m.role)));
  const [u, a] = chat2.messages;
  assert.equal(a.id, saved[1].id);
  const reply = await storedReply(token, transport2.sessionId(id), u.id);
  assert.equal(textOf(a), reply.content);
  assert.equal(a.parts.filter((p) => p.type === "dynamic-tool").length, 1);
  assertGrew(seen2, reply.content);
  const hello = frames.slice(mark).find((x) => x.dir === "out" && x.f.type === "hello");
  assert.equal(hello.f.session_id, transport.sessionId(id));
  // The reply was still streaming: the new page named the parts held, and the server went on after them.
  assert.ok(hello.f.stream && hello.f.stream.seq === reply.seq, "the reload did not name the parts held: " + JSON.stringify(hello.f));
  assertNoPartTwice(partsReceived(hello.f.session_id, reply.seq));
  assert.equal(await transport2.reconnectToStream({ chatId: id }), null, "a finished turn is resumed again");
  transport2.close();
});

test("stop() sends cancel: the server logs the words so far as a cancelled entry, the message stays as it was, the chat goes on", async () => {
  const { token, transport } = await setup();
  const chat = new Chat({ id: randomUUID(), transport });
  const seen = watch(chat);
  const errors = [];
  transport.tether(chat.id).on("error", (e) => errors.push(e));
  const text = "stop me soon, well before this long reply of many words is over";
  chat.sendMessage({ text });
  await waitFor("two words of the reply", () => words(seen.at(-1) || "") >= 2);
  await chat.stop();
  assert.equal(chat.status, "ready");
  const atStop = textOf(chat.messages[1]);
  const u = chat.messages[0];
  const sid = transport.sessionId(chat.id);
  const userSeq = (await stored(token, sid)).find((m) => m.metadata.id === u.id).seq;
  await waitFor("the cancel frame", () => frames.some((x) => x.dir === "out" && x.f.type === "cancel" && x.f.reply_to === userSeq));
  assert.equal(frames.filter((x) => x.dir === "out" && x.f.type === "cancel" && x.ws.sid === sid).length, 1, "cancel sent more than once");
  const reply = await storedReply(token, sid, u.id);
  assert.equal(reply.metadata.cancelled, true, "the stored reply is not marked cancelled: " + JSON.stringify(reply));
  const full = `I searched for "${text}". Found 3 results for "${text}".`;
  assert.ok(reply.content.startsWith(atStop), `stopped at ${JSON.stringify(atStop)}, stored ${JSON.stringify(reply.content)}`);
  assert.ok(full.startsWith(reply.content) && reply.content.length < full.length, `stored ${JSON.stringify(reply.content)}: not cut short of ${JSON.stringify(full)}`);
  // The cancelled entry came over the socket too, after the stop: it is not added to the stopped message.
  await waitFor("the cancelled entry on the socket", () => frames.some((x) => x.dir === "in" && x.ws.sid === sid && x.f.type === "message" && x.f.seq === reply.seq));
  assert.equal(textOf(chat.messages[1]), atStop, "the stopped message grew");
  assert.equal(await transport.reconnectToStream({ chatId: chat.id }), null, "a stopped turn is resumed");
  await chat.sendMessage({ text: "and now in full" });
  assert.equal(chat.status, "ready", String(chat.error));
  const reply2 = await storedReply(token, sid, chat.messages[2].id);
  assert.equal(reply2.metadata.cancelled, undefined);
  assert.equal(textOf(chat.messages[3]), reply2.content);
  assert.ok(errors.length === 0, "errors: " + JSON.stringify(errors));
  transport.close();
});
