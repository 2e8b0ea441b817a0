#!/usr/bin/env python3
# A PEP 503 package index on 127.0.0.1 for the tests, offline.
#
# Usage: pkgindex.py ROOT
# Writes a pure-Python wheel of the project "sbxdemo" 1.0 (module sbxdemo with
# VALUE = 42) under ROOT/simple/sbxdemo/, serves ROOT on 127.0.0.1 at a free
# port, prints that port on a line of its own on stdout, and serves until
# killed. The index URL is then http://127.0.0.1:PORT/simple/
#
# The project "sbxslow" has no file: while ROOT/hold exists its page is sent
# a space every half second (pip, which times out only on a silent read,
# waits all that time), then it ends without a link, so that pip fails. Tests
# hold installs running with it as long as they need.
import base64
import hashlib
import http.server
import os
import sys
import time
import zipfile

NAME, VERSION = "sbxdemo", "1.0"


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def write_wheel(folder):
    dist = f"{NAME}-{VERSION}.dist-info"
    files = {
        f"{NAME}/__init__.py": b"VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: pkgindex.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [record_line(p, d) for p, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(folder, wheel), "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
    return wheel


def main():
    root = sys.argv[1]
    folder = os.path.join(root, "simple", NAME)
    os.makedirs(folder, exist_ok=True)
    wheel = write_wheel(folder)
    with open(os.path.join(folder, "index.html"), "w") as f:
        f.write(f'<!DOCTYPE html><html><body><a href="{wheel}">{wheel}</a></body></html>\n')
    with open(os.path.join(root, "simple", "index.html"), "w") as f:
        f.write(f'<!DOCTYPE html><html><body><a href="{NAME}/">{NAME}</a></body></html>\n')
    os.chdir(root)

    hold = os.path.join(root, "hold")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if not self.path.startswith("/simple/sbxslow"):
                return super().do_GET()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(b"<!DOCTYPE html><html><body>")
                while os.path.exists(hold):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.5)
                self.wfile.write(b"</body></html>\n")
            except (BrokenPipeError, ConnectionResetError):
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
