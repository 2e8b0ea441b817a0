#!/usr/bin/env python3
# A package index that needs basic auth, and a plain "API" server, on
# 127.0.0.1 for tests/test-egress, offline.
#
# Usage: egress-index.py ROOT USER PASSWORD
# Writes pure-Python wheels of sbxdemo 1.0 (VALUE = 42), sbxdemo2 (7),
# sbxdemo3 (3) and sbxdemo4 (4) under ROOT/packages/, PEP 503 pages under ROOT/simple/ whose
# links are relative and leave /simple/ (../../packages/...), serves ROOT
# on one port, every path only with USER:PASSWORD (401 otherwise), and on a
# second port answers every GET with "egress-api-ok PATH"; a third accepts
# connections and never reads from them (a host that does not keep up).
# /packages/trickle.whl comes at 200 bytes a second, /simple/slowpage/ at
# 4,000 (both 1 MiB: minutes).
# Index layouts besides ../../packages/, each a package whose page links to
# its wheel (with a #sha256 fragment): sbxpa at /packages/ (pypiserver's
# absolute link), sbxpb at ../../root/pypi/+f/HASH/ (devpi), sbxpc at
# ../../files/; sbxpd's link has a query (/get/NAME.whl?sig=1), sbxpf's is
# on another host, http://127.0.0.2:INDEX/ (a "spy" listening there, and a
# second on another port of 127.0.0.1, log "SPY PATH auth|noauth" per
# request to ROOT/spy.log and answer 404).
# Prints the ports on one line ("INDEX API SINK SPY SPY2", SPY2 the index's
# port, or 0 when 127.0.0.2 cannot be bound), logs "STATUS PATH" per index
# request to ROOT/requests.log, and serves until killed or until the test
# that started it is gone (a crashed test leaves nothing behind).
import base64
import hashlib
import http.server
import os
import socket
import sys
import threading
import time
import zipfile

ROOT, USER, PASSWORD = sys.argv[1], sys.argv[2], sys.argv[3]
EXPECTED = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
LOG_LOCK = threading.Lock()


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def write_wheel(folder, name, value):
    dist = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": f"VALUE = {value}\n".encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: egress-index.py\n"
                         b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [record_line(p, d) for p, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(folder, wheel), "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
    return wheel


def build():
    # What an index holds besides its pages and files: the relay must never
    # fetch it (/simple/../secret.txt).
    with open(os.path.join(ROOT, "secret.txt"), "w") as f:
        f.write("secret-of-the-index\n")
    packages = os.path.join(ROOT, "packages")
    os.makedirs(packages, exist_ok=True)
    names = []
    for name, value in (("sbxdemo", 42), ("sbxdemo2", 7), ("sbxdemo3", 3), ("sbxdemo4", 4)):
        wheel = write_wheel(packages, name, value)
        folder = os.path.join(ROOT, "simple", name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "index.html"), "w") as f:
            f.write(f'<!DOCTYPE html><html><body><a href="../../packages/{wheel}">'
                    f'{wheel}</a></body></html>\n')
        names.append(name)
    layouts = (("sbxpa", "packages", "/packages/"),
               ("sbxpb", "root/pypi/+f/0ab/1234567890abcdef", "../../root/pypi/+f/0ab/1234567890abcdef/"),
               ("sbxpc", "files", "../../files/"),
               ("sbxpd", "get", "/get/"),
               ("sbxpf", "packages", "http://127.0.0.2:{port}/packages/"))
    for name, where, link in layouts:
        folder = os.path.join(ROOT, where)
        os.makedirs(folder, exist_ok=True)
        wheel = write_wheel(folder, name, 100 + len(names))
        with open(os.path.join(folder, wheel), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        query = "?sig=1" if name == "sbxpd" else ""
        page = os.path.join(ROOT, "simple", name)
        os.makedirs(page, exist_ok=True)
        with open(os.path.join(page, "index.html"), "w") as f:
            f.write(f'<!DOCTYPE html><html><body><a href="{link}{wheel}{query}#sha256={digest}">'
                    f'{wheel}</a></body></html>\n')
        names.append(name)
    with open(os.path.join(ROOT, "simple", "index.html"), "w") as f:
        f.write("<!DOCTYPE html><html><body>" +
                "".join(f'<a href="{n}/">{n}</a>' for n in names) + "</body></html>\n")


class Index(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=ROOT, **k)

    def log_message(self, *args):
        pass

    def log(self, status):
        with LOG_LOCK, open(os.path.join(ROOT, "requests.log"), "a") as f:
            f.write(f"{status} {self.path}\n")

    def authorised(self):
        if self.headers.get("Authorization") == EXPECTED:
            return True
        self.log(401)
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="test index"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def slow(self, ctype, total, rate):
        """TOTAL bytes of CTYPE at RATE bytes a second (the relay's bounds)."""
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(total))
        self.end_headers()
        sent = 0
        try:
            while sent < total:
                self.wfile.write(b"x" * (rate // 10))
                self.wfile.flush()
                sent += rate // 10
                time.sleep(0.1)
        except OSError:
            pass

    def do_GET(self):
        if self.authorised():
            self.log(200)
            if self.path == "/packages/trickle.whl":
                self.slow("application/octet-stream", 1 << 20, 200)
            elif self.path == "/simple/slowpage/":
                self.slow("text/html", 1 << 20, 4000)
            else:
                super().do_GET()

    def do_HEAD(self):
        if self.authorised():
            super().do_HEAD()


class Api(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = f"egress-api-ok {self.path}\n".encode()
        if self.path.startswith("/big/"):  # /big/N: N bytes (at most 16 MiB)
            body = b"b" * min(int(self.path[5:]), 16 << 20)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Spy(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        auth = "auth" if self.headers.get("Authorization") else "noauth"
        with LOG_LOCK, open(os.path.join(ROOT, "spy.log"), "a") as f:
            f.write(f"{self.server.tag} {self.path} {auth}\n")
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET


def spy(host, port, tag):
    try:
        s = http.server.ThreadingHTTPServer((host, port), Spy)
    except OSError:
        return 0
    s.tag = tag
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s.server_address[1]


def sink(lsock):
    held = []
    while True:
        c, _ = lsock.accept()
        held.append(c)


def orphaned(parent):
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main():
    threading.Thread(target=orphaned, args=(os.getppid(),), daemon=True).start()
    index = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    build()
    port = index.server_address[1]
    page = os.path.join(ROOT, "simple", "sbxpf", "index.html")
    with open(page) as f:
        text = f.read().replace("{port}", str(port))
    with open(page, "w") as f:
        f.write(text)
    spies = (spy("127.0.0.1", 0, "other-port"), spy("127.0.0.2", port, "other-host"))
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    threading.Thread(target=sink, args=(lsock,), daemon=True).start()
    print(port, api.server_address[1], lsock.getsockname()[1], *spies, flush=True)
    index.serve_forever()


if __name__ == "__main__":
    main()
