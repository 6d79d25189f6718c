#!/usr/bin/env python3
"""Opens a page of qcg-broker --grid --html in headless Chromium, as an admin's
browser does, and prints what it rendered as one JSON object:

  {"errors": [...], "clusters": [{"name", "kind", "x", "y", "width", "height",
   "text"}], "pairs": [{"from", "to", "technique", "label"}], "rows": [...],
   "width", "height"}

errors: every console message of level warning or error, uncaught exception
and failed load (Chromium's own log).  Positions are the rendered boxes
(getBoundingClientRect), so a cluster drawn off the page or with no size
shows.  Chromium is driven over its DevTools protocol on a pipe
(--remote-debugging-pipe: JSON messages ended by NUL, commands on fd 3,
answers and events on fd 4), so no port is opened.

  chromium_page.py PAGE [--screenshot PNG] [--timeout S]

Exit 0 with the JSON on stdout, or 1 with one line on stderr (Chromium
missing, did not start, or the page did not load within the timeout).
"""
import argparse
import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

# What the page drew, read inside the page once it loaded.
RENDERED = r"""
(() => {
  const box = e => { const r = e.getBoundingClientRect();
    return {x: r.x, y: r.y, width: r.width, height: r.height}; };
  const clusters = [...document.querySelectorAll('#grid .cluster')].map(e =>
    Object.assign({name: e.dataset.cluster, kind: e.dataset.kind, text: e.textContent}, box(e)));
  const pairs = [...document.querySelectorAll('#grid .pair')].map(e =>
    ({from: e.dataset.from, to: e.dataset.to, technique: e.dataset.technique,
      label: e.querySelector('text').textContent}));
  const rows = [...document.querySelectorAll('#clusters tr[data-cluster]')].map(e =>
    [...e.cells].map(c => c.textContent));
  const cells = [...document.querySelectorAll('#pairs td[data-from]')].map(e =>
    ({from: e.dataset.from, to: e.dataset.to, text: e.innerText}));
  return JSON.stringify({clusters, pairs, rows, cells, title: document.title,
    width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight});
})()
"""


class Browser:
    def __init__(self, binary, profile, timeout):
        r_cmd, self.w_cmd = os.pipe()
        self.r_evt, w_evt = os.pipe()
        self.log = open(os.path.join(profile, "stderr.log"), "w+")

        def fds_3_and_4():
            # Chromium reads commands on its fd 3 and writes on its fd 4.
            os.dup2(r_cmd, 3)
            os.dup2(w_evt, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-sync",
             "--user-data-dir=" + profile, "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds_3_and_4, pass_fds=(3, 4), stdout=subprocess.DEVNULL,
            stderr=self.log, env=dict(os.environ, HOME=profile))
        for fd in (r_cmd, w_evt):
            os.close(fd)
        self.deadline = time.monotonic() + timeout
        self.buf = b""
        self.next_id = 0
        self.events = []

    def send(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w_cmd, json.dumps(msg).encode() + b"\0")
        return self.next_id

    def read(self):
        """The next message; events are kept in self.events as they pass."""
        while b"\0" not in self.buf:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.r_evt], [], [], left)[0]:
                raise TimeoutError("no answer from Chromium in time")
            chunk = os.read(self.r_evt, 65536)
            if not chunk:
                raise EOFError("Chromium closed its pipe")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\0", 1)
        return json.loads(line)

    def call(self, method, params=None, session=None):
        want = self.send(method, params, session)
        while True:
            m = self.read()
            if m.get("id") == want:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"].get("message")))
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method):
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self.read()
            if m.get("method") == method:
                return m
            self.events.append(m)

    def close(self):
        try:
            self.send("Browser.close")
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        os.close(self.w_cmd)
        os.close(self.r_evt)
        self.log.close()


def errors_of(events):
    out = []
    for m in events:
        p = m.get("params", {})
        if m.get("method") == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            out.append("exception: " + d.get("exception", {}).get("description", d.get("text", "")))
        elif m.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
            out.append("console.%s: %s" % (p["type"], " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", []))))
        elif m.get("method") == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
            out.append("%s: %s" % (p["entry"]["source"], p["entry"]["text"]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("--screenshot")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    binary = shutil.which("chromium")
    if binary is None:
        print("chromium_page: chromium is not installed (scripts/install-deps)", file=sys.stderr)
        return 1
    profile = tempfile.mkdtemp(prefix="qcg-chromium-")
    b = Browser(binary, profile, a.timeout)
    try:
        target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            b.call(domain + ".enable", session=s)
        b.call("Page.navigate", {"url": "file://" + os.path.abspath(a.page)}, session=s)
        b.wait_event("Page.loadEventFired")
        r = b.call("Runtime.evaluate", {"expression": RENDERED, "returnByValue": True}, session=s)
        if "exceptionDetails" in r:
            raise RuntimeError("reading the page: %s" % r["exceptionDetails"].get("text"))
        seen = json.loads(r["result"]["value"])
        if a.screenshot:
            shot = b.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                     "clip": {"x": 0, "y": 0, "width": seen["width"], "height": seen["height"], "scale": 1}}, session=s)
            with open(a.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        # Messages that arrived with the answers, then any still under way.
        b.call("Runtime.evaluate", {"expression": "0"}, session=s)
        seen["errors"] = errors_of(b.events)
    except (TimeoutError, EOFError, RuntimeError, OSError) as e:
        b.log.seek(0)
        err = b.log.read()[-2000:] if b.proc.poll() is not None else ""
        print("chromium_page: %s%s" % (e, (": " + err.strip().splitlines()[-1]) if err.strip() else ""), file=sys.stderr)
        return 1
    finally:
        b.close()
        shutil.rmtree(profile, ignore_errors=True)
    json.dump(seen, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
