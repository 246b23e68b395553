// The endpoint side of Tether's agent protocol (gateway/AGENT-PROTOCOL.md)
// for Node, standard library only. Copy this file next to your agent.
//
//   import { serve } from "./tether_endpoint.mjs";
//   serve({ secret, step, tool, port: 9000 });
//
// step(request) and tool(request) are async generators over the answer's
// lines (objects); each is sent as one NDJSON line as soon as it is
// yielded. A thrown error becomes an {"type":"error"} line. Requests whose
// Tether-Signature is not the HMAC-SHA256 of "<t>.<body>" under the secret,
// or whose t is more than 5 minutes off this clock, are refused with 401.

import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";

const MAX_BODY = 4 << 20;
const MAX_SKEW = 300; // seconds

export function sign(secret, body, t) {
  const mac = createHmac("sha256", secret).update(`${t}.`).update(body).digest("hex");
  return `t=${t},v1=${mac}`;
}

// checkSignature returns null when header signs body, else why not.
export function checkSignature(secret, header, body, now = Date.now() / 1000) {
  const parts = Object.fromEntries((header || "").split(",").map((p) => {
    const i = p.indexOf("=");
    return i < 0 ? [p, ""] : [p.slice(0, i), p.slice(i + 1)];
  }));
  const t = Number.parseInt(parts.t ?? "", 10);
  if (!Number.isFinite(t) || String(t) !== parts.t) return "missing or malformed Tether-Signature";
  if (Math.abs(now - t) > MAX_SKEW) return "stale timestamp in Tether-Signature (more than 5 minutes off)";
  const want = Buffer.from(sign(secret, body, t).split("v1=")[1]);
  const got = Buffer.from(parts.v1 ?? "");
  if (want.length !== got.length || !timingSafeEqual(want, got)) return "bad signature";
  return null;
}

// Finished tool answers by Idempotency-Key: a request Tether sends again
// (its answer was lost) gets the same answer without a second run.
// In memory, bounded, lost when this process restarts.
class ResultCache {
  constructor(size = 1024) { this.size = size; this.items = new Map(); }
  get(key) { return this.items.get(key); }
  put(key, lines) {
    this.items.set(key, lines);
    while (this.items.size > this.size) this.items.delete(this.items.keys().next().value);
  }
}

export function serve({ secret, step, tool, host = "127.0.0.1", port = 9000, log = (m) => console.error(m) }) {
  if (!secret) throw new Error("a shared secret is required (the same as tether serve --agent-secret)");
  const cache = new ResultCache();
  const refuse = (res, code, why) => {
    res.writeHead(code, { "Content-Type": "text/plain" }).end(why + "\n");
    log(`refused ${code}: ${why}`);
  };
  const server = createServer(async (req, res) => {
    if (req.method !== "POST") return refuse(res, 405, "POST only");
    const chunks = [];
    let size = 0;
    for await (const c of req) {
      size += c.length;
      if (size > MAX_BODY) return refuse(res, 413, `a body of at most ${MAX_BODY} bytes`);
      chunks.push(c);
    }
    const body = Buffer.concat(chunks);
    const why = checkSignature(secret, req.headers["tether-signature"], body);
    if (why) return refuse(res, 401, why);
    let request;
    try { request = JSON.parse(body); } catch (e) { return refuse(res, 400, `body is not JSON: ${e.message}`); }
    const key = req.headers["idempotency-key"] ?? "";
    let lines;
    if (request.kind === "step") {
      lines = step(request);
    } else if (request.kind === "tool") {
      log(`tool ${request.name} call_id=${request.call_id} key=${key}`);
      const cached = cache.get(key);
      lines = cached ? (async function* () { yield* cached; })() : remember(key, tool(request));
    } else {
      return refuse(res, 400, `unknown kind ${JSON.stringify(request.kind)}`);
    }
    log(`${request.kind} key=${key}`);
    res.writeHead(200, { "Content-Type": "application/x-ndjson" }); // chunked: no length
    try {
      for await (const line of lines) {
        if (res.destroyed) return log(`${request.kind} key=${key}: Tether went away mid-answer`);
        res.write(JSON.stringify(line) + "\n");
      }
    } catch (e) {
      res.write(JSON.stringify({ type: "error", message: `${e.name}: ${e.message}` }) + "\n");
    }
    res.end();
  });
  async function* remember(key, lines) {
    const seen = [];
    for await (const line of lines) { seen.push(line); yield line; }
    cache.put(key, seen);
  }
  server.keepAliveTimeout = 60_000;
  server.listen(port, host, () => {
    const a = server.address();
    log(`listening on http://${a.address}:${a.port}/agent`);
  });
  return server;
}
