#!/usr/bin/python3
"""A downstream on a non-Node HTTP/2 stack (Debian's python3-h2) that reports exactly how a
response ended: END_STREAM, RST_STREAM (with its code), or neither. For the integrity tests.

Usage: h2_downstream.py JSON, with JSON keys:
  mode      "h2c": HTTP/2 with prior knowledge over plain TCP to host:port (the tunnel entry);
            "hbone": mTLS CONNECT to host:port (the waypoint) for `authority`, then `line` is sent
            inside the tunnel and the bytes that come back are the response body.
  host, port; cert, key, ca (hbone); authority, line (hbone); path (h2c)
  grpc      h2c: a unary gRPC call (POST, one request message, END_STREAM).
  upload    "forever" sends request DATA (1 KiB every 50 ms, once the response headers are in) and
            never ends it.
  resetAfterMs  resets our stream (RST_STREAM(CANCEL)) this long after the response headers.
  keepBody  add the body received (latin-1) as "body".
  halfClose hbone: END_STREAM right after `line` (else our side stays open).
  window    SETTINGS_INITIAL_WINDOW_SIZE we announce (a small one makes a slow reader).
  delayMs   pause before returning each DATA frame's flow-control credit (a slow reader).
Prints one JSON line: status, bytes (DATA payload received), patternOk (the body is the test
pattern, byte i = (i * 31 + 7) & 0xff; gRPC: after the 5-byte message prefix), ended
(END_STREAM seen), reset (RST_STREAM code, or null), trailers, eof (the connection closed),
resetSent (we reset the stream ourselves).
"""
import json
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

_PERIOD = bytes(((i * 31 + 7) & 0xFF) for i in range(256))


def main():
    o = json.loads(sys.argv[1])
    raw = socket.create_connection((o["host"], int(o["port"])), timeout=20)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock = raw
    if o["mode"] == "hbone":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.check_hostname = False  # SPIFFE certificates carry a URI SAN only
        ctx.load_verify_locations(o["ca"])
        ctx.load_cert_chain(o["cert"], o["key"])
        ctx.set_alpn_protocols(["h2"])
        sock = ctx.wrap_socket(raw)
    window = int(o.get("window", 65535))
    delay = float(o.get("delayMs", 0)) / 1000
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, validate_outbound_headers=False, header_encoding="utf-8"))
    conn.local_settings = h2.settings.Settings(client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window, h2.settings.SettingCodes.ENABLE_PUSH: 0})
    conn.initiate_connection()
    sid = conn.get_next_available_stream_id()
    upload = o.get("upload") == "forever"
    if o["mode"] == "hbone":
        conn.send_headers(sid, [(":method", "CONNECT"), (":authority", o["authority"])])
    elif o.get("grpc"):
        conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", o["path"]), (":authority", "echo"), ("content-type", "application/grpc"), ("te", "trailers")])
        conn.send_data(sid, b"\x00\x00\x00\x00\x02hi", end_stream=not upload)
    else:
        method = "POST" if upload else "GET"
        conn.send_headers(sid, [(":method", method), (":scheme", "http"), (":path", o["path"]), (":authority", "echo")], end_stream=not upload)
    sock.sendall(conn.data_to_send())

    r = {"status": None, "bytes": 0, "patternOk": True, "ended": False, "reset": None, "trailers": None, "eof": False}
    skip = 5 if o.get("grpc") else 0  # the gRPC message prefix is not pattern
    offset = 0
    next_upload = time.monotonic()
    reset_at = None
    body = b""
    deadline = time.monotonic() + float(o.get("timeoutS", 20))
    sock.settimeout(0.05)
    while not r["ended"] and r["reset"] is None and time.monotonic() < deadline:
        if upload and r["status"] is not None and time.monotonic() >= next_upload and conn.local_flow_control_window(sid) >= 1024:
            conn.send_data(sid, b"u" * 1024)
            sock.sendall(conn.data_to_send())
            next_upload = time.monotonic() + 0.05
        if reset_at is not None and time.monotonic() >= reset_at:
            # We give up on the stream mid-upload: RST_STREAM(CANCEL).
            conn.reset_stream(sid, error_code=8)
            sock.sendall(conn.data_to_send())
            r["resetSent"] = True
            break
        try:
            data = sock.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            continue
        except OSError as e:
            r["error"] = repr(e)
            r["eof"] = True
            break
        if not data:
            r["eof"] = True
            break
        for ev in conn.receive_data(data):
            if getattr(ev, "stream_id", sid) != sid:
                continue
            if isinstance(ev, h2.events.ResponseReceived):
                r["status"] = int(dict(ev.headers)[":status"])
                if "resetAfterMs" in o:
                    reset_at = time.monotonic() + float(o["resetAfterMs"]) / 1000
                if o["mode"] == "hbone" and r["status"] == 200:
                    conn.send_data(sid, (o["line"] + "\n").encode(), end_stream=bool(o.get("halfClose")))
            elif isinstance(ev, h2.events.DataReceived):
                for b in ev.data:
                    if offset >= skip and b != _PERIOD[(offset - skip) & 0xFF]:
                        r["patternOk"] = False
                    offset += 1
                r["bytes"] += len(ev.data)
                if o.get("keepBody"):
                    body += ev.data
                if delay:
                    sock.sendall(conn.data_to_send())
                    time.sleep(delay)
                conn.acknowledge_received_data(ev.flow_controlled_length, sid)
            elif isinstance(ev, h2.events.TrailersReceived):
                r["trailers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.StreamEnded):
                r["ended"] = True
            elif isinstance(ev, h2.events.StreamReset):
                r["reset"] = int(ev.error_code)
        sock.sendall(conn.data_to_send())
    # A reset may follow END_STREAM right away (RFC 9113 8.1: the server asks us to stop sending).
    if r["ended"]:
        # A polite client still sending stops now: it ends its side (as gRPC clients half-close).
        if upload and r["reset"] is None:
            try:
                conn.end_stream(sid)
                sock.sendall(conn.data_to_send())
            except h2.exceptions.StreamClosedError:
                pass
        sock.settimeout(0.2)
        try:
            data = sock.recv(65536)
            for ev in conn.receive_data(data) if data else []:
                if isinstance(ev, h2.events.StreamReset) and ev.stream_id == sid:
                    r["reset"] = int(ev.error_code)
        except (OSError, ssl.SSLWantReadError):
            pass
    r["timedOut"] = not r["ended"] and r["reset"] is None and not r["eof"] and not r.get("resetSent")
    if o.get("keepBody"):
        r["body"] = body.decode("latin-1")
    print(json.dumps(r))
    sock.close()


if __name__ == "__main__":
    main()
