#!/usr/bin/env node
// A small agent for `tether serve --agent http`, Node standard library
// only: the same rule-based agent and tools as ../agent-python/agent.py.
//
//   AGENT_SECRET=s3cret node agent.mjs            # listens on 127.0.0.1:9000
//   TETHER_AGENT_SECRET=s3cret bin/tether serve --dev-tokens \
//       --agent http --agent-url http://127.0.0.1:9000/agent
//
// Tools: `lookup` (idempotent) and `place_order` (not idempotent, slow:
// AGENT_TOOL_DELAY seconds). Environment: AGENT_SECRET (required),
// AGENT_HOST, AGENT_PORT (9000; 0 picks one), AGENT_TOOL_DELAY (5),
// AGENT_STREAM_DELAY (0.05).

import { setTimeout as sleep } from "node:timers/promises";
import { serve } from "./tether_endpoint.mjs";

const env = process.env;
const TOOL_DELAY = Number(env.AGENT_TOOL_DELAY ?? "5") * 1000;
const STREAM_DELAY = Number(env.AGENT_STREAM_DELAY ?? "0.05") * 1000;

const FACTS = {
  tether: "Tether keeps agent conversations alive across dropped connections.",
  node: "This agent is written for Node, standard library only.",
};

async function* tool(req) {
  const args = req.args ?? {};
  if (req.name === "lookup") {
    const q = String(args.query ?? "").toLowerCase();
    const hits = Object.entries(FACTS).filter(([k]) => q.includes(k)).map(([, v]) => v);
    yield { type: "result", text: hits.join(" ") || `Nothing found for ${JSON.stringify(q)}.` };
  } else if (req.name === "place_order") {
    const item = String(args.item ?? "").trim() || "something";
    for (let i = 1; i <= 3; i++) {
      await sleep(TOOL_DELAY / 3);
      yield { type: "progress", text: `contacting the shop (${i} of 3)` };
    }
    yield { type: "result", text: `order placed for ${item}` };
  } else {
    yield { type: "error", message: `unknown tool ${JSON.stringify(req.name)}` };
  }
}

async function* words(text) {
  const ws = text.split(" ");
  for (let i = 0; i < ws.length; i++) {
    if (i) await sleep(STREAM_DELAY);
    yield { type: "text", text: i ? " " + ws[i] : ws[i] };
  }
}

async function* step(req) {
  const text = req.user.content;
  const done = (req.steps ?? []).filter((s) => s.role === "tool" && s.metadata.status !== "started");
  if (done.length) {
    const last = done[done.length - 1];
    const { name, status } = last.metadata;
    yield* words(status === "failed"
      ? `The ${name} did not finish (${last.content}); ask again if you still want it.`
      : `Done: ${last.content}`);
    yield { type: "reply", agent_context: { last_tool: name } };
    return;
  }
  const low = text.toLowerCase();
  if (low.startsWith("order") || ` ${low} `.includes(" buy ")) {
    yield* words("Placing your order.");
    yield { type: "tool_call", name: "place_order", args: { item: text.split(" ").slice(1).join(" ") }, idempotent: false };
  } else if (text.includes("?") || /^(what|who|look)/.test(low)) {
    yield { type: "tool_call", name: "lookup", args: { query: text }, idempotent: true };
  } else {
    yield* words(`You said: ${text}`);
    yield { type: "reply" };
  }
}

if (!env.AGENT_SECRET) {
  console.error("agent: set AGENT_SECRET (the same secret as tether serve's --agent-secret / TETHER_AGENT_SECRET)");
  process.exit(2);
}
serve({ secret: env.AGENT_SECRET, step, tool, host: env.AGENT_HOST ?? "127.0.0.1", port: Number(env.AGENT_PORT ?? "9000") });
