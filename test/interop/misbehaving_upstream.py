#!/usr/bin/python3
"""A misbehaving upstream on a non-Node HTTP/2 stack (Debian's python3-h2), for the integrity tests.

Usage: misbehaving_upstream.py MODE IP PORT [CERT KEY CA]
  h2c    HTTP/2 with prior knowledge over plain TCP (an app behind the destination ztunnel).
  hbone  mTLS HTTP/2 that answers CONNECT (in place of a destination ztunnel); inside each tunnel
         it serves HTTP/1.1 (when the first bytes are a request line) or one TCP command line.
Prints "ready" on stdout once listening; runs until killed.

Every body is the test pattern: byte i is (i * 31 + 7) & 0xff.

h2c, request target /x?bytes=N&then=T&code=C[&grpc=1][&cl=L]: 200 (with content-length L), N bytes of DATA (gRPC: one message of
N bytes), then T: `end` (END_STREAM; gRPC: trailers grpc-status 0), `rst` (RST_STREAM(C), no
END_STREAM; with `nohead=1`, before any response), `end-rst` (END_STREAM, then RST_STREAM(C) if the client still sends: RFC 9113 8.1).
The response starts as soon as the request headers arrive; request bodies are read and dropped.

HTTP/1.1 in a tunnel, /x?bytes=N&send=M&framing=F&then=T&code=C: 200 with F `length`
(Content-Length N), `chunked` or `close` (close-delimited, Connection: close); M (default N) body
bytes, then T: `end` (the message completes: terminal chunk; for `close`, END_STREAM on the
tunnel), `fin` (END_STREAM on the tunnel: the connection closed mid-body), `rst` (RST_STREAM(C) on
the tunnel).

TCP command in a tunnel, one line `send N then=T code=C`: N bytes, then T as for h2c (`end`,
`rst`, `end-rst`) applied to the CONNECT stream.

What the peer did is recorded for requests with `id=X` (h2c; `then=hold` answers 200 and some
DATA, then waits) and for tunnels opened with the command `hold id=X` (waits, reading): whether
its side ended with END_STREAM or RST_STREAM (code), and the bytes it sent. `GET /report?id=X`
(h2c) and the command `report id=X` answer with that record as JSON.
"""
import json
import select
import socket
import ssl
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings


_PERIOD = bytes(((i * 31 + 7) & 0xFF) for i in range(256))


def pattern(size):
    """The first `size` bytes of the pattern (it repeats every 256 bytes)."""
    return (_PERIOD * (size // 256 + 1))[:size]


# How each request or tunnel that carried `id=X` ended on our side: {"ended", "reset", "bytes"}.
FATES = {}
FATES_LOCK = threading.Lock()


def fate(fid, **change):
    with FATES_LOCK:
        f = FATES.setdefault(fid, {"ended": False, "reset": None, "bytes": 0})
        for k, v in change.items():
            f[k] = f[k] + v if k == "bytes" else v
        return dict(f)


class Stream:
    """Frames queued for one stream, sent as flow control allows."""

    def __init__(self, sid):
        self.sid = sid
        self.fate = None  # the id its end is recorded under
        self.queue = []  # ("data", bytes, end) | ("headers", list, end) | ("rst", code) | ("call", fn)
        self.remote_ended = False
        self.reset = False
        self.tunnel = None  # hbone: bytes received inside the CONNECT, until handled
        self.handled = False


class Conn:
    def __init__(self, sock, mode):
        self.sock = sock
        self.mode = mode
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, validate_outbound_headers=False, validate_inbound_headers=False, header_encoding="utf-8"))
        self.streams = {}

    def run(self):
        self.h2.initiate_connection()
        self.flush()
        self.sock.settimeout(None)
        while True:
            self.pump()
            # TLS may hold decrypted bytes that select cannot see.
            pending = self.sock.pending() if isinstance(self.sock, ssl.SSLSocket) else 0
            if not pending and not select.select([self.sock], [], [], 0.02)[0]:
                continue
            try:
                data = self.sock.recv(1 << 20)
            except OSError:
                return
            if not data:
                return
            try:
                events = self.h2.receive_data(data)
            except h2.exceptions.ProtocolError as e:
                print(f"protocol error: {e}", file=sys.stderr)
                self.flush()
                return
            for ev in events:
                self.on_event(ev)
            self.flush()

    def flush(self):
        out = self.h2.data_to_send()
        if out:
            self.sock.sendall(out)

    def on_event(self, ev):
        sid = getattr(ev, "stream_id", None)
        if isinstance(ev, h2.events.RequestReceived):
            st = self.streams.setdefault(sid, Stream(sid))
            headers = dict(ev.headers)
            if self.mode == "hbone":
                if headers.get(":method") != "CONNECT":
                    self.h2.send_headers(sid, [(":status", "405")], end_stream=True)
                    return
                self.h2.send_headers(sid, [(":status", "200")])
                st.tunnel = b""
            else:
                self.h2c_request(st, headers)
        elif isinstance(ev, h2.events.DataReceived):
            self.h2.acknowledge_received_data(ev.flow_controlled_length, sid)
            st = self.streams.get(sid)
            if st is not None and st.fate is not None:
                fate(st.fate, bytes=len(ev.data))
            if st is not None and st.tunnel is not None and not st.handled:
                st.tunnel += ev.data
                self.tunnel_input(st)
        elif isinstance(ev, h2.events.StreamEnded):
            st = self.streams.get(sid)
            if st is not None:
                st.remote_ended = True
                if st.fate is not None:
                    fate(st.fate, ended=True)
        elif isinstance(ev, h2.events.StreamReset):
            st = self.streams.get(sid)
            if st is not None:
                st.reset = True
                st.queue = []
                if st.fate is not None:
                    fate(st.fate, reset=int(ev.error_code))

    # h2c -----------------------------------------------------------------------------------------

    def h2c_request(self, st, headers):
        q = {k: v[0] for k, v in parse_qs(urlsplit(headers.get(":path", "/")).query).items()}
        if urlsplit(headers.get(":path", "/")).path == "/report":
            body = json.dumps(fate(q["id"])).encode()
            st.queue.append(("headers", [(":status", "200"), ("content-type", "application/json")], False))
            st.queue.append(("data", body, True))
            return
        if "id" in q:
            st.fate = q["id"]
            fate(st.fate)
        n = int(q.get("bytes", "0"))
        then = q.get("then", "end")
        code = int(q.get("code", "0"))
        grpc = q.get("grpc") == "1"
        ctype = "application/grpc" if grpc else "application/octet-stream"
        head = [(":status", "200"), ("content-type", ctype)]
        if "cl" in q:
            head.append(("content-length", q["cl"]))
        if q.get("nohead") == "1":  # reset before any response
            st.queue.append(("rst", code))
            return
        st.queue.append(("headers", head, False))
        body = pattern(n)
        if grpc:
            body = b"\x00" + n.to_bytes(4, "big") + body
        st.queue.append(("data", body, then not in ("rst", "hold") and not grpc))
        if grpc and then not in ("rst", "hold"):
            st.queue.append(("headers", [("grpc-status", "0")], True))
        if then in ("rst", "end-rst"):
            self.wait(st, q)
            st.queue.append(("rst", code))

    def wait(self, st, q):
        """`delay=MS`: hold the last frame back, so the receiver has passed everything else on."""
        if "delay" in q:
            st.queue.append(("wait", float(q["delay"]) / 1000))

    # hbone tunnels -------------------------------------------------------------------------------

    def tunnel_input(self, st):
        if st.handled:
            return
        buf = st.tunnel
        if not buf[:7].split(b" ")[0] in (b"send", b"hold", b"report"):
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            target = buf.split(b" ", 2)[1].decode()
            # Requests carry no body here; the next one (keep-alive) may follow.
            st.tunnel = buf[end + 4:]
            st.handled = not self.h1_response(st, target)
            if not st.handled:
                self.tunnel_input(st)
            return
        nl = buf.find(b"\n")
        if nl < 0:
            return
        st.handled = True
        words = buf[:nl].decode().split()
        if words[0] in ("hold", "report"):
            args = dict(w.split("=", 1) for w in words[1:])
            if words[0] == "report":
                st.queue.append(("data", json.dumps(fate(args["id"])).encode(), True))
            else:
                st.fate = args["id"]
                fate(st.fate, bytes=len(buf) - nl - 1)
            return
        args = dict(w.split("=", 1) for w in words[2:])
        n = int(words[1])
        then = args.get("then", "end")
        code = int(args.get("code", "0"))
        st.queue.append(("data", pattern(n), then not in ("rst", "end")))
        self.wait(st, args)
        if then == "end":
            st.queue.append(("data", b"", True))
        if then in ("rst", "end-rst"):
            st.queue.append(("rst", code))

    def h1_response(self, st, target):
        q = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
        n = int(q.get("bytes", "0"))
        m = int(q.get("send", str(n)))
        framing = q.get("framing", "length")
        then = q.get("then", "end")
        code = int(q.get("code", "0"))
        head = "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
        if framing == "length":
            head += f"content-length: {n}\r\n"
        elif framing == "chunked":
            head += "transfer-encoding: chunked\r\n"
        else:
            head += "connection: close\r\n"
        body = pattern(m)
        if framing == "chunked" and m > 0:
            body = f"{m:x}\r\n".encode() + body + b"\r\n"
        if framing == "chunked" and then == "end":
            body += b"0\r\n\r\n"
        end_stream = then == "fin" or (then == "end" and framing == "close")
        st.queue.append(("data", (head + "\r\n").encode() + body, False))
        self.wait(st, q)
        if end_stream:
            st.queue.append(("data", b"", True))
        if then == "rst":
            st.queue.append(("rst", code))
        # The connection stays usable only after a complete, length- or chunk-framed answer.
        return then == "end" and framing != "close"

    # sending ---------------------------------------------------------------------------------------

    def pump(self):
        for st in list(self.streams.values()):
            while st.queue and not st.reset:
                item = st.queue[0]
                kind = item[0]
                if kind == "wait":
                    st.queue[0] = ("until", time.monotonic() + item[1])
                elif kind == "until":
                    if time.monotonic() < item[1]:
                        break
                    st.queue.pop(0)
                elif kind == "headers":
                    self.h2.send_headers(st.sid, item[1], end_stream=item[2])
                    st.queue.pop(0)
                elif kind == "rst":
                    try:
                        self.h2.reset_stream(st.sid, error_code=item[1])
                    except h2.exceptions.StreamClosedError:
                        print(f"stream {st.sid} already closed: no RST_STREAM", file=sys.stderr)
                    st.queue.pop(0)
                else:
                    data, end = item[1], item[2]
                    window = min(self.h2.local_flow_control_window(st.sid), self.h2.max_outbound_frame_size)
                    if window <= 0 and data:
                        break
                    chunk = data[:window]
                    rest = data[len(chunk):]
                    self.h2.send_data(st.sid, chunk, end_stream=end and not rest)
                    if rest:
                        st.queue[0] = ("data", rest, end)
                    else:
                        st.queue.pop(0)
                # One write per frame: a reset follows the data on the wire, never before it.
                self.flush()


def serve(mode, ip, port, tls):
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((ip, port))
    lsock.listen(64)
    print("ready", flush=True)
    while True:
        sock, _ = lsock.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=handle, args=(sock, mode, tls), daemon=True).start()


def handle(sock, mode, tls):
    try:
        if tls is not None:
            sock.settimeout(10)
            sock = tls.wrap_socket(sock, server_side=True)
        Conn(sock, mode).run()
    except Exception as e:  # one connection's failure never stops the server
        print(f"connection error: {e!r}", file=sys.stderr)
    finally:
        try:
            sock.close()
        except OSError:
            pass


def main():
    mode, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tls = None
    if mode == "hbone":
        cert, key, ca = sys.argv[4:7]
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.minimum_version = ssl.TLSVersion.TLSv1_3
        tls.verify_mode = ssl.CERT_REQUIRED
        tls.load_verify_locations(ca)
        tls.load_cert_chain(cert, key)
        tls.set_alpn_protocols(["h2"])
    serve(mode, ip, port, tls)


if __name__ == "__main__":
    main()
