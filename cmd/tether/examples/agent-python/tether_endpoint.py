"""The endpoint side of Tether's agent protocol (gateway/AGENT-PROTOCOL.md),
standard library only. Copy this file next to your agent.

    endpoint = Endpoint(secret, step=my_step, tool=my_tool)
    endpoint.serve("127.0.0.1", 9000)

step(request) and tool(request) get the request body (a dict) and yield
the answer's lines as dicts; each is sent as one NDJSON line the moment it
is yielded. A step yields {"type": "text", ...} parts and ends with one
"reply", "tool_call" or "error" line; a tool yields "progress" lines and
ends with one "result" or "error" line. An exception becomes an "error"
line.

Every request is refused (401) unless its Tether-Signature is the HMAC-
SHA256 of "<t>.<body>" under the shared secret and t is within 5 minutes
of this machine's clock.
"""

import hashlib
import hmac
import json
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 4 << 20
MAX_SKEW = 300  # seconds


def sign(secret: bytes, body: bytes, t: int) -> str:
    """The Tether-Signature header value for body sent at unix time t."""
    mac = hmac.new(secret, str(t).encode() + b"." + body, hashlib.sha256)
    return "t=%d,v1=%s" % (t, mac.hexdigest())


def check_signature(secret: bytes, header: str, body: bytes, now=None):
    """None if header signs body, else why not."""
    parts = dict(p.split("=", 1) for p in (header or "").split(",") if "=" in p)
    try:
        t = int(parts.get("t", ""))
    except ValueError:
        return "missing or malformed Tether-Signature"
    now = time.time() if now is None else now
    if abs(now - t) > MAX_SKEW:
        return "stale timestamp in Tether-Signature (more than 5 minutes off)"
    want = sign(secret, body, t).split("v1=", 1)[1]
    if not hmac.compare_digest(want, parts.get("v1", "")):
        return "bad signature"
    return None


class ResultCache:
    """Answers of finished tool requests by Idempotency-Key, so that a
    request Tether sends again (its answer was lost) gets the same answer
    without running the tool twice. In memory: bounded, and lost on a
    restart of this process."""

    def __init__(self, size=1024):
        self.size, self.lock, self.items = size, threading.Lock(), OrderedDict()

    def get(self, key):
        with self.lock:
            return self.items.get(key)

    def put(self, key, lines):
        with self.lock:
            self.items[key] = lines
            while len(self.items) > self.size:
                self.items.popitem(last=False)


class Endpoint:
    def __init__(self, secret, step, tool, log=None):
        if not secret:
            raise ValueError("a shared secret is required (the same as tether serve --agent-secret)")
        self.secret = secret.encode() if isinstance(secret, str) else secret
        self.step, self.tool = step, tool
        self.cache = ResultCache()
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))

    def handler(self):
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, chunked answers

            def log_message(self, fmt, *args):  # one line per request is ours
                pass

            def refuse(self, code, why):
                body = (why + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                endpoint.log("refused %d: %s" % (code, why))

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n <= 0 or n > MAX_BODY:
                    return self.refuse(400, "a JSON body of at most %d bytes is required" % MAX_BODY)
                body = self.rfile.read(n)
                why = check_signature(endpoint.secret, self.headers.get("Tether-Signature"), body)
                if why:
                    return self.refuse(401, why)
                try:
                    req = json.loads(body)
                except ValueError as e:
                    return self.refuse(400, "body is not JSON: %s" % e)
                key = self.headers.get("Idempotency-Key", "")
                kind = req.get("kind")
                if kind == "step":
                    lines = endpoint.step(req)
                elif kind == "tool":
                    endpoint.log("tool %s call_id=%s key=%s" % (req.get("name"), req.get("call_id"), key))
                    cached = endpoint.cache.get(key)
                    lines = iter(cached) if cached is not None else endpoint._remember(key, endpoint.tool(req))
                else:
                    return self.refuse(400, "unknown kind %r" % kind)
                endpoint.log("%s key=%s" % (kind, key))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for line in lines:
                        self.chunk(json.dumps(line).encode() + b"\n")
                except (BrokenPipeError, ConnectionResetError):
                    endpoint.log("%s key=%s: Tether went away mid-answer" % (kind, key))
                    return
                except Exception as e:  # the agent failed: say so, in the protocol
                    self.chunk(json.dumps({"type": "error", "message": "%s: %s" % (type(e).__name__, e)}).encode() + b"\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def chunk(self, data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        return Handler

    def _remember(self, key, lines):
        """Pass the tool's lines on, keeping them for a repeat of key once
        the final line came."""
        seen = []
        for line in lines:
            seen.append(line)
            yield line
        self.cache.put(key, seen)

    def serve(self, host="127.0.0.1", port=9000):
        server = ThreadingHTTPServer((host, port), self.handler())
        server.daemon_threads = True
        h, p = server.server_address[:2]
        self.log("listening on http://%s:%d/agent" % (h, p))
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
