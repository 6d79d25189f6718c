#!/usr/bin/env python3
"""Opens COUNT TCP connections to HOST:PORT, each from an address of its
own (127.0.2.1, 127.0.2.2, ...: on loopback all of 127/8 is local), that
send nothing; holds them SECONDS, then closes them.  The connects are not
waited for: those the server cannot accept stay in its listen queue.

    idle-from-many.py HOST PORT COUNT SECONDS
"""
import socket
import sys
import time

host, port, count, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
held = []
for i in range(count):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.%d.%d" % (2 + i // 250, 1 + i % 250), 0))
    s.setblocking(False)
    try:
        s.connect((host, port))
    except BlockingIOError:
        pass
    held.append(s)
time.sleep(seconds)
for s in held:
    s.close()
