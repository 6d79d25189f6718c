#!/usr/bin/env python3
"""A TLS 1.3 client that waits between its handshake and its first request.

    slow-tls-client.py HOST PORT CA CERTKEY PAUSE

Prints what the server's refusal looks like to it: "alert NAME" when it
read the server's alert (e.g. alert SSLV3_ALERT_CERTIFICATE_REVOKED),
"error TEXT" for anything else (a reset, an end of file), "answered" when
the server took the request.  A TLS 1.3 server refuses a client's
certificate after the client's handshake is done: the client learns why
only if the alert is still there to read when it gets to it.
"""
import socket
import ssl
import sys
import time

host, port, ca, certkey, pause = sys.argv[1:6]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ctx.check_hostname = False
ctx.load_verify_locations(ca)
ctx.load_cert_chain(certkey)
with socket.create_connection((host, int(port)), timeout=5) as raw:
    with ctx.wrap_socket(raw) as tls:
        time.sleep(float(pause))
        try:
            tls.sendall(b"POST / HTTP/1.1\r\nHost: qcg\r\nContent-Length: 0\r\n\r\n")
            tls.recv(100)
            print("answered")
        except ssl.SSLError as e:
            print(f"alert {e.reason}" if "ALERT" in str(e.reason) else f"error {e}")
        except OSError as e:
            print(f"error {e}")
