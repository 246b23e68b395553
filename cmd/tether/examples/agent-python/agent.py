#!/usr/bin/env python3
"""A small agent for `tether serve --agent http`, standard library only.

    AGENT_SECRET=s3cret python3 agent.py          # listens on 127.0.0.1:9000
    TETHER_AGENT_SECRET=s3cret bin/tether serve --dev-tokens \\
        --agent http --agent-url http://127.0.0.1:9000/agent

Two tools: `lookup` (idempotent: Tether may run it again after a crash)
and `place_order` (not idempotent, and slow — AGENT_TOOL_DELAY seconds —
so there is time to drop the connection or kill the node while it runs:
Tether then logs it failed "interrupted" and never runs it twice).

With OPENAI_BASE_URL set (and OPENAI_API_KEY, OPENAI_MODEL as needed) an
OpenAI-compatible model decides and writes the replies; without, a rule
decides: "order …" places an order, a question looks it up, anything else
is answered word by word.

Environment: AGENT_SECRET (required), AGENT_HOST (127.0.0.1),
AGENT_PORT (9000; 0 picks a free one), AGENT_TOOL_DELAY (5),
AGENT_STREAM_DELAY (0.05 seconds between words).
"""

import json
import os
import sys
import time
import urllib.request

from tether_endpoint import Endpoint

TOOL_DELAY = float(os.environ.get("AGENT_TOOL_DELAY", "5"))
STREAM_DELAY = float(os.environ.get("AGENT_STREAM_DELAY", "0.05"))

FACTS = {
    "tether": "Tether keeps agent conversations alive across dropped connections.",
    "python": "This agent is written in Python, standard library only.",
    "time": "It is %s UTC." % time.strftime("%H:%M", time.gmtime()),
}

TOOLS = {
    "lookup": {
        "idempotent": True,
        "description": "Look a topic up in the agent's small fact table.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
    "place_order": {
        "idempotent": False,
        "description": "Place an order for an item. Takes a while; never repeat it.",
        "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    },
}


# ---- tools -------------------------------------------------------------

def run_tool(req):
    name, args = req.get("name"), req.get("args") or {}
    if name == "lookup":
        q = str(args.get("query", "")).lower()
        hits = [v for k, v in FACTS.items() if k in q]
        yield {"type": "result", "text": " ".join(hits) or "Nothing found for %r." % q}
    elif name == "place_order":
        item = str(args.get("item", "")).strip() or "something"
        steps = 3
        for i in range(1, steps + 1):
            time.sleep(TOOL_DELAY / steps)
            yield {"type": "progress", "text": "contacting the shop (%d of %d)" % (i, steps)}
        yield {"type": "result", "text": "order #%d placed for %s" % (abs(hash(req.get("call_id"))) % 10000, item)}
    else:
        yield {"type": "error", "message": "unknown tool %r" % name}


# ---- steps without a model -----------------------------------------------

def words(text):
    for i, w in enumerate(text.split(" ")):
        if i:
            time.sleep(STREAM_DELAY)
        yield {"type": "text", "text": w if i == 0 else " " + w}


def rule_step(req):
    text = req["user"]["content"]
    steps = req.get("steps") or []
    done = [s for s in steps if s["role"] == "tool" and s["metadata"].get("status") != "started"]
    if done:
        last = done[-1]
        name, status = last["metadata"].get("name"), last["metadata"].get("status")
        if status == "failed":
            reply = "The %s did not finish (%s); ask again if you still want it." % (name, last["content"])
        else:
            reply = "Done: %s" % last["content"]
        yield from words(reply)
        yield {"type": "reply", "agent_context": {"last_tool": name}}
        return
    low = text.lower()
    if low.startswith("order") or " buy " in " %s " % low:
        yield from words("Placing your order.")
        yield {"type": "tool_call", "name": "place_order", "args": {"item": text.split(" ", 1)[-1]}, "idempotent": False}
    elif "?" in text or low.startswith(("what", "who", "look")):
        yield {"type": "tool_call", "name": "lookup", "args": {"query": text}, "idempotent": True}
    else:
        yield from words("You said: %s" % text)
        yield {"type": "reply"}


# ---- steps with an OpenAI-compatible model ------------------------------

def messages_of(req):
    msgs = [{"role": "system", "content": "You are a helpful agent. Use the tools when they help."}]
    if req.get("summary"):
        msgs.append({"role": "system", "content": "Earlier: " + req["summary"]})
    for e in (req.get("history") or []) + [req["user"]] + (req.get("steps") or []):
        md = e.get("metadata") or {}
        if e["role"] == "user":
            msgs.append({"role": "user", "content": e["content"]})
        elif e["role"] == "agent":
            msgs.append({"role": "assistant", "content": e["content"]})
        elif e["role"] == "tool" and md.get("status") == "started":
            msgs.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": md["call_id"], "type": "function",
                "function": {"name": md["name"], "arguments": json.dumps(md.get("args") or {})}}]})
        elif e["role"] == "tool":
            msgs.append({"role": "tool", "tool_call_id": md["call_id"], "content": e["content"]})
    return msgs


def model_step(req):
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    body = {
        "model": os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), "stream": True, "messages": messages_of(req),
        "tools": [{"type": "function", "function": {"name": n, "description": t["description"], "parameters": t["parameters"]}}
                  for n, t in TOOLS.items()],
    }
    headers = {"Content-Type": "application/json"}
    if os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = "Bearer " + os.environ["OPENAI_API_KEY"]
    http_req = urllib.request.Request(base + "/chat/completions", json.dumps(body).encode(), headers)
    call = {"name": "", "arguments": ""}
    with urllib.request.urlopen(http_req, timeout=120) as resp:
        for raw in resp:  # server-sent events, one "data: {...}" a line
            raw = raw.strip()
            if not raw.startswith(b"data:") or raw == b"data: [DONE]":
                continue
            choices = json.loads(raw[5:]).get("choices") or [{}]
            delta = choices[0].get("delta") or {}
            if delta.get("content"):
                yield {"type": "text", "text": delta["content"]}
            for tc in delta.get("tool_calls") or []:
                fn = tc.get("function") or {}
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
    if call["name"]:
        spec = TOOLS.get(call["name"], {})
        yield {"type": "tool_call", "name": call["name"], "args": json.loads(call["arguments"] or "{}"),
               "idempotent": spec.get("idempotent", False)}
    else:
        yield {"type": "reply"}


def main():
    step = model_step if os.environ.get("OPENAI_BASE_URL") else rule_step
    print("agent: %s" % ("model at " + os.environ["OPENAI_BASE_URL"] if step is model_step else "rule-based (no OPENAI_BASE_URL)"),
          file=sys.stderr, flush=True)
    if not os.environ.get("AGENT_SECRET"):
        sys.exit("agent: set AGENT_SECRET (the same secret as tether serve's --agent-secret / TETHER_AGENT_SECRET)")
    Endpoint(os.environ["AGENT_SECRET"], step=step, tool=run_tool).serve(
        os.environ.get("AGENT_HOST", "127.0.0.1"), int(os.environ.get("AGENT_PORT", "9000")))


if __name__ == "__main__":
    main()
