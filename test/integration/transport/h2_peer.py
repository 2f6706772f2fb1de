#!/usr/bin/python3
"""A misbehaving HBONE client on a non-Node HTTP/2 stack (Debian's python3-h2), for the transport
hardening tests. It connects with mutual TLS, runs one scenario and prints one JSON line.

Usage: h2_peer.py HOST PORT CERT KEY CA AUTHORITY MODE N

MODE:
  malformed        N CONNECTs that also carry :scheme and :path (malformed, RFC 9113 8.5), then
                   one valid CONNECT with an HTTP/1.1 GET inside. Reports the reset code of each
                   malformed stream, the valid CONNECT's status and the inner response status.
  rapid-reset      N streams opened (CONNECT) and reset (CANCEL) at once, in batches, as fast
                   as possible (CVE-2023-44487). Reports the GOAWAY, if any, and how many pairs
                   were sent before it.
  rapid-reset-loop rapid-reset again and again for N ms, reconnecting whenever the waypoint closes
                   the connection (or refuses it). Reports connections made, refused, pairs sent.
  malformed-last   N malformed CONNECTs and nothing after them; then the connection is closed.
  headers          one CONNECT carrying N extra headers (x-h<i>: v).
  header-bytes     one CONNECT carrying one header whose value is N bytes.
  cancel-burst     a well-behaved client with N streams open (0: the waypoint's advertised
                   SETTINGS_MAX_CONCURRENT_STREAMS): N CONNECTs, all answered; then, three
                   times, the N open ones reset (CANCEL) and N new CONNECTs opened, in one write
                   (allowed: a reset stream no longer counts, RFC 9113 5.1.2), reading the
                   answers in between. Reports per round {"ok": answered 200, "reset": {code:
                   count}, "open": unanswered}, and "limit" (the N used).
  rapid-reset-slow N streams opened and reset at once, 10 per write with 2 ms pauses (each
                   write read on its own). Reports the GOAWAY and how many were sent before it.
  streams          N CONNECTs in one write. Reports each stream's fate and the GOAWAY.
  ping-flood       N PING frames in one write, without reading the answers for 1 s.
  settings-flood   N empty SETTINGS frames in one write, without reading the answers for 1 s.
Every mode then keeps reading for up to 2 s (or until the connection closes) and reports
{"streams": {id: {"status"|"reset"}}, "goaway": {"code", "last"}|null, "eof": bool, ...}.
"""
import json
import select
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings


def connect(host, port, cert, key, ca, rcvbuf=0):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False  # SPIFFE certificates carry a URI SAN only
    ctx.load_verify_locations(ca)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2"])
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        # A small receive buffer: acknowledgements we do not read pile up at the waypoint, not here.
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    raw.settimeout(10)
    raw.connect((host, int(port)))
    sock = ctx.wrap_socket(raw)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, validate_outbound_headers=False, validate_inbound_headers=False))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    return sock, conn


class Peer:
    def __init__(self, sock, conn):
        self.sock, self.conn = sock, conn
        self.streams = {}
        self.bodies = {}
        self.goaway = None
        self.eof = False
        self.on_response = None

    def pump(self, timeout):
        """Read and handle what arrives within `timeout` seconds; False once the connection is gone."""
        end = time.time() + timeout
        while not self.eof:
            left = end - time.time()
            if left <= 0:
                break
            pending = self.sock.pending() if hasattr(self.sock, "pending") else 0
            if not pending:
                r, _, _ = select.select([self.sock], [], [], left)
                if not r:
                    break
            try:
                data = self.sock.recv(1 << 20)
            except (ConnectionError, ssl.SSLError, OSError):
                self.eof = True
                break
            if not data:
                self.eof = True
                break
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError as e:
                self.streams.setdefault("protocol_error", str(e))
                self.eof = True
                break
            for ev in events:
                self.handle(ev)
            self.flush()
        return not self.eof

    def handle(self, ev):
        sid = getattr(ev, "stream_id", None)
        if isinstance(ev, h2.events.ResponseReceived):
            status = int(dict(ev.headers)[b":status"])
            self.streams.setdefault(sid, {})["status"] = status
            if self.on_response:
                self.on_response(sid, status)
        elif isinstance(ev, h2.events.DataReceived):
            self.bodies[sid] = self.bodies.get(sid, b"") + ev.data
            self.conn.acknowledge_received_data(ev.flow_controlled_length, sid)
        elif isinstance(ev, h2.events.StreamReset):
            self.streams.setdefault(sid, {})["reset"] = int(ev.error_code)
        elif isinstance(ev, h2.events.StreamEnded):
            self.streams.setdefault(sid, {})["ended"] = True
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = {"code": int(ev.error_code), "last": ev.last_stream_id}

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            try:
                self.sock.sendall(data)
            except (ConnectionError, ssl.SSLError, OSError):
                self.eof = True


def rapid_reset_loop(host, port, cert, key, ca, authority, ms):
    end = time.time() + ms / 1000
    out = {"connections": 0, "refused": 0, "sent": 0}
    headers = [(":method", "CONNECT"), (":authority", authority)]
    while time.time() < end:
        try:
            sock, conn = connect(host, port, cert, key, ca)
        except (ConnectionError, ssl.SSLError, OSError):
            out["refused"] += 1
            time.sleep(0.01)
            continue
        out["connections"] += 1
        peer = Peer(sock, conn)
        try:
            while time.time() < end and not peer.goaway and not peer.eof:
                for _ in range(200):
                    sid = conn.get_next_available_stream_id()
                    conn.send_headers(sid, headers)
                    conn.reset_stream(sid, error_code=8)
                    out["sent"] += 1
                peer.flush()
                peer.pump(0)
        except (h2.exceptions.ProtocolError, ConnectionError, ssl.SSLError, OSError):
            pass
        try:
            sock.close()
        except OSError:
            pass
    print(json.dumps(out))


def main():
    host, port, cert, key, ca, authority, mode, n = sys.argv[1:9]
    n = int(n)
    if mode == "rapid-reset-loop":
        return rapid_reset_loop(host, port, cert, key, ca, authority, n)
    sock, conn = connect(host, port, cert, key, ca, 4096 if mode.endswith("-flood") else 0)
    peer = Peer(sock, conn)
    peer.pump(0.2)  # the server's SETTINGS
    connect_headers = [(":method", "CONNECT"), (":authority", authority)]
    out = {}

    if mode in ("malformed", "malformed-last"):
        for _ in range(n):
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, connect_headers + [(":scheme", "https"), (":path", "/")])
        peer.flush()
        if mode == "malformed-last":
            # Nothing after them: the connection closes once their resets arrived.
            peer.pump(1)
            out["streams"] = {str(k): v for k, v in peer.streams.items()}
            sock.close()
            print(json.dumps(out))
            return
        sid = conn.get_next_available_stream_id()

        def on_response(s, status):
            if s == sid and status == 200:
                conn.send_data(sid, b"GET /after-malformed HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n")

        peer.on_response = on_response
        conn.send_headers(sid, connect_headers)
        peer.flush()
        end = time.time() + 5
        while time.time() < end and peer.pump(0.1):
            body = peer.bodies.get(sid, b"")
            if b"\r\n\r\n" in body:
                break
        body = peer.bodies.get(sid, b"")
        out["inner_status"] = int(body.split(b" ")[1]) if body.startswith(b"HTTP/1.1 ") else None
        out["valid"] = sid
    elif mode in ("rapid-reset", "rapid-reset-slow"):
        # Fast: 500 pairs per write, as fast as possible; slow: 10 per write, 2 ms apart.
        batch, pause = (500, 0) if mode == "rapid-reset" else (10, 0.002)
        sent = 0
        while sent < n and not peer.goaway and not peer.eof:
            for _ in range(min(batch, n - sent)):
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, connect_headers)
                conn.reset_stream(sid, error_code=8)
                sent += 1
            peer.flush()
            peer.pump(pause)
        out["sent"] = sent
    elif mode == "cancel-burst":
        rounds = []

        def open_batch():
            ids = []
            for _ in range(n):
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, connect_headers)
                ids.append(sid)
            return ids

        def settle(ids):
            end = time.time() + 5
            while time.time() < end and any("status" not in peer.streams.get(i, {}) and "reset" not in peer.streams.get(i, {}) for i in ids):
                if not peer.pump(0.1):
                    break
            r = {"ok": 0, "reset": {}, "open": 0}
            for i in ids:
                st = peer.streams.get(i, {})
                if st.get("status") == 200:
                    r["ok"] += 1
                elif "reset" in st:
                    r["reset"][str(st["reset"])] = r["reset"].get(str(st["reset"]), 0) + 1
                else:
                    r["open"] += 1
            return r

        if n == 0:
            n = conn.remote_settings.max_concurrent_streams
        out["limit"] = n
        ids = open_batch()
        peer.flush()
        rounds.append(settle(ids))
        for _ in range(3):
            if peer.goaway or peer.eof:
                break
            for i in ids:
                if "reset" not in peer.streams.get(i, {}):
                    conn.reset_stream(i, error_code=8)
            ids = open_batch()
            peer.flush()  # one write: the resets and the new HEADERS together
            rounds.append(settle(ids))
        out["rounds"] = rounds
    elif mode == "streams":
        for _ in range(n):
            conn.send_headers(conn.get_next_available_stream_id(), connect_headers)
        peer.flush()
    elif mode in ("headers", "header-bytes"):
        extra = [("x-h%d" % i, "v") for i in range(n)] if mode == "headers" else [("x-big", "a" * n)]
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, connect_headers + extra)
        peer.flush()
    elif mode == "ping-flood":
        for i in range(n):
            conn.ping(i.to_bytes(8, "big"))
        peer.flush()
        time.sleep(1)
    elif mode == "settings-flood":
        try:
            for _ in range(n):
                # A SETTINGS frame with no parameters; h2 tracks acks, so write it raw.
                sock.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        except (ConnectionError, ssl.SSLError, OSError):
            peer.eof = True  # the waypoint closed the connection mid-flood
        time.sleep(1)
    else:
        raise SystemExit("unknown mode " + mode)

    end = time.time() + 2
    while time.time() < end and peer.pump(0.1):
        if mode in ("headers", "header-bytes") and peer.streams:
            break
        if mode == "ping-flood" and peer.goaway:
            break
    out["streams"] = {str(k): v for k, v in peer.streams.items()}
    out["goaway"] = peer.goaway
    out["eof"] = peer.eof
    print(json.dumps(out))
    try:
        sock.close()
    except OSError:
        pass


if __name__ == "__main__":
    main()
