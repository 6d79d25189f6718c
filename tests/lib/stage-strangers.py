#!/usr/bin/env python3
"""Fills a SOAP server's handshake stage with strangers, then runs a command.

Opens COUNT TCP connections that send nothing, one from each address
127.0.0.FIRST, 127.0.0.FIRST+1, ... (one per address: no address holds more
than another, so none gives way by that rule), checks that one more
stranger is turned away (the stage is full), runs CMD at once (well within
the fifth of the handshake deadline after which the oldest stranger would
give way anyway), then reports and exits with CMD's status.

    stage-strangers.py HOST PORT FIRST COUNT -- CMD...

Prints "full" or "not full", CMD's output, and "strangers kept N".
"""
import socket
import subprocess
import sys
import time

host, port, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cmd = sys.argv[6:] if sys.argv[5] == "--" else sys.exit("usage: see the script")


def stranger(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.%d" % n, 0))
    s.settimeout(5)
    s.connect((host, port))
    return s


def closed(s, seconds):
    """Whether the server closes s within seconds."""
    s.settimeout(seconds)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


held = [stranger(first + i) for i in range(count)]
extra = stranger(first + count)
print("full" if closed(extra, 2) else "not full", flush=True)
extra.close()
rc = subprocess.run(cmd, check=False).returncode
time.sleep(0.2)
print("strangers kept", sum(1 for s in held if not closed(s, 0.01)), flush=True)
for s in held:
    s.close()
sys.exit(rc)
