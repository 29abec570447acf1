#!/usr/bin/env python3
"""Clicks the element matching a CSS selector in the first page of a Chromium started with
--remote-debugging-port, through the DevTools protocol (DOM and Input domains only, so it works
with the page's JavaScript turned off). Used by scripts/browser-test.sh. Python's standard
library only: a minimal WebSocket client (RFC 6455: one text frame out, masked; frames in).

    python3 scripts/cdp-click.py PORT SELECTOR

Exits 0 once the click was sent, 1 when there is no page or no such element.
"""
import base64
import json
import os
import socket
import struct
import sys
import urllib.request
from urllib.parse import urlparse


def connect(url):
    u = urlparse(url)
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        (
            f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            raise SystemExit("DevTools closed the connection")
        head += chunk
    if b" 101 " not in head.split(b"\r\n")[0]:
        raise SystemExit(f"no WebSocket: {head!r}")
    return s


def send(s, text):
    data = text.encode()
    mask = os.urandom(4)
    n = len(data)
    if n < 126:
        header = struct.pack("!BB", 0x81, 0x80 | n)
    elif n < 65536:
        header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
    else:
        header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
    s.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def exactly(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise SystemExit("DevTools closed the connection")
        out += chunk
    return out


def receive(s):
    first, second = exactly(s, 2)
    n = second & 0x7F
    if n == 126:
        n = struct.unpack("!H", exactly(s, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", exactly(s, 8))[0]
    return first & 0x0F, exactly(s, n)


def main():
    port, selector = sys.argv[1], sys.argv[2]
    pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
    page = next((p for p in pages if p.get("type") == "page"), None)
    if page is None:
        print("no page", file=sys.stderr)
        return 1
    s = connect(page["webSocketDebuggerUrl"])
    ids = iter(range(1, 1 << 30))

    def call(method, **params):
        i = next(ids)
        send(s, json.dumps({"id": i, "method": method, "params": params}))
        while True:
            op, data = receive(s)
            if op == 1:
                msg = json.loads(data)
                if msg.get("id") == i:
                    return msg.get("result", {})

    root = call("DOM.getDocument")["root"]["nodeId"]
    node = call("DOM.querySelector", nodeId=root, selector=selector).get("nodeId")
    if not node:
        print(f"no element {selector}", file=sys.stderr)
        return 1
    q = call("DOM.getBoxModel", nodeId=node)["model"]["content"]
    x, y = sum(q[0::2]) / 4, sum(q[1::2]) / 4
    for kind in ("mousePressed", "mouseReleased"):
        call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
    s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
