#!/usr/bin/env python3
"""Opens COUNT TCP connections to HOST:PORT that send nothing, waits
SECONDS, then prints how many the server still holds: neither closed nor
answered (a reflector answers FAIL to a connection it gives up on).

    idle-conns.py HOST PORT COUNT SECONDS
"""
import socket
import sys
import time

host, port, count, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
conns = []
for _ in range(count):
    s = socket.create_connection((host, port), timeout=5)
    conns.append(s)
time.sleep(seconds)
open_ = 0
for s in conns:
    s.setblocking(False)
    try:
        s.recv(1)  # an answer or the end: given up on
    except BlockingIOError:
        open_ += 1
    except OSError:
        pass
    s.close()
print(open_)
