#!/usr/bin/python3
"""An HBONE client on a non-Node HTTP/2 stack (Debian's python3-h2), for interop tests.

Usage: h2_hbone_client.py HOST PORT CERT KEY CA AUTHORITY MODE
MODE "get": CONNECT AUTHORITY, send an HTTP/1.1 GET inside the tunnel, print a JSON line with
the CONNECT status and the inner response bytes (latin-1).
MODE "malformed": send a CONNECT that also carries :scheme and :path (malformed per RFC 9113
8.5); print the stream's fate: {"reset": error_code} or {"status": N}.
"""
import json
import socket
import ssl
import sys

import h2.config
import h2.connection
import h2.events


def main():
    host, port, cert, key, ca, authority, mode = sys.argv[1:8]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False  # SPIFFE certificates carry a URI SAN only
    ctx.load_verify_locations(ca)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection((host, int(port)), timeout=10)
    sock = ctx.wrap_socket(raw)
    assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, validate_outbound_headers=False))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    sid = conn.get_next_available_stream_id()
    headers = [(":method", "CONNECT"), (":authority", authority)]
    if mode == "malformed":
        headers += [(":scheme", "https"), (":path", "/")]
    conn.send_headers(sid, headers)
    sock.sendall(conn.data_to_send())

    result = {}
    body = b""
    sent_request = False
    while True:
        data = sock.recv(65536)
        if not data:
            result["eof"] = True
            break
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                result["status"] = int(dict(ev.headers)[b":status"])
                if mode == "get" and result["status"] == 200 and not sent_request:
                    conn.send_data(sid, ("GET /python-h2 HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n").encode())
                    sent_request = True
            elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid:
                body += ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length, sid)
            elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == sid:
                result["reset"] = int(ev.error_code)
            elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                result["ended"] = True
        sock.sendall(conn.data_to_send())
        if "reset" in result or result.get("ended") or (mode == "malformed" and "status" in result):
            break
    result["body"] = body.decode("latin-1")
    print(json.dumps(result))
    sock.close()


if __name__ == "__main__":
    main()
