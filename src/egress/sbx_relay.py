# SPDX-License-Identifier: MIT
# mcp-sandbox's egress relay: runs inside a sandbox container as
# `python3 -u -c PROGRAM sbx-relay FRAME_MAX WINDOW PORT` (nothing is written
# into the container), started by the server over the engine's exec stream
# (src/egress/egress.c). Standard library only.
#
# It listens on 127.0.0.1:PORT (0: a free port), told in its hello, on the
# sandbox's own loopback. A fixed PORT that is taken by another relay (one
# an earlier stream or server left running) is freed by killing that relay;
# taken by anything else, the relay says "port-in-use PORT" on stderr and
# exits with 3. It carries every connection accepted there over its stdin
# and stdout to the server, which decides what each one may reach: the
# sandbox itself has no route anywhere. Frames, both ways:
#
#   type u8 | flags u8 (0) | stream id u16 | length u32 | payload (<= FRAME_MAX)
#
#   HELLO  1  relay -> server, id 0: {"v": 1, "port": P, "pid": PID} (JSON)
#   OPEN   2  relay -> server: a connection was accepted as stream id
#   DATA   3  both: bytes of the stream
#   CLOSE  4  both: the sender is done with the stream (each side sends one;
#             frames for a stream the receiver no longer knows are dropped)
#   WINDOW 5  both: u32, more bytes the sender of WINDOW will take on it
#
# Each side may send at most WINDOW bytes of DATA per stream beyond what the
# other has granted with WINDOW frames (per-stream flow control), so neither
# ever has to stop reading its input: the server bounds what it holds for a
# sandbox however this program behaves (code in the sandbox can replace it).
# End of stdin (the server went away) ends the relay.
import errno
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys
import time

T_HELLO, T_OPEN, T_DATA, T_CLOSE, T_WINDOW = 1, 2, 3, 4, 5
HDR = struct.Struct('>BBHI')
WIN = struct.Struct('>I')
FRAME_MAX = int(sys.argv[2]) if len(sys.argv) > 2 else 32768
WINDOW = int(sys.argv[3]) if len(sys.argv) > 3 else 65536
PORT = int(sys.argv[4]) if len(sys.argv) > 4 else 0
OUT_HIGH = 4 * FRAME_MAX  # unsent bytes to the server past which clients wait
CONNS_MAX = 256

IN_FD = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 100)
OUT_FD = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 100)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
for fd in (IN_FD, OUT_FD):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)

out = bytearray()


def frame(t, sid, payload=b''):
    out.extend(HDR.pack(t, 0, sid, len(payload)))
    out.extend(payload)


class Conn:
    def __init__(self, sid, sock):
        self.sid = sid
        self.sock = sock
        self.window = WINDOW    # bytes we may still send to the server
        self.buf = bytearray()  # from the server, not yet written to the client
        self.written = 0        # written to the client, not yet granted back
        self.sent_close = False
        self.got_close = False


conns = {}
next_sid = 1


def new_sid():
    global next_sid
    for _ in range(65535):
        sid = next_sid
        next_sid = next_sid % 65535 + 1
        if sid not in conns:
            return sid
    return 0


def drop(c):
    """Closes the client's socket; forgets the stream once both sides closed."""
    if c.sock is not None:
        try:
            c.sock.close()
        except OSError:
            pass
        c.sock = None
    if not c.sent_close:
        frame(T_CLOSE, c.sid)
        c.sent_close = True
    if c.got_close:
        conns.pop(c.sid, None)


def on_frame(t, sid, payload):
    c = conns.get(sid)
    if c is None:
        return
    if t == T_DATA:
        if c.sock is not None and not c.got_close:
            c.buf.extend(payload)
    elif t == T_WINDOW and len(payload) == 4:
        c.window += WIN.unpack(payload)[0]
    elif t == T_CLOSE:
        c.got_close = True
        if not c.buf or c.sock is None:
            drop(c)


inbuf = bytearray()


def read_server():
    try:
        data = os.read(IN_FD, 262144)
    except BlockingIOError:
        return True
    if not data:
        return False
    inbuf.extend(data)
    off = 0
    while len(inbuf) - off >= HDR.size:
        t, _, sid, n = HDR.unpack_from(inbuf, off)
        if n > FRAME_MAX:
            return False
        if len(inbuf) - off < HDR.size + n:
            break
        on_frame(t, sid, bytes(inbuf[off + HDR.size:off + HDR.size + n]))
        off += HDR.size + n
    del inbuf[:off]
    return True


def write_server():
    try:
        n = os.write(OUT_FD, out)
    except BlockingIOError:
        return True
    except OSError:
        return False
    del out[:n]
    return True


def accept(lsock):
    try:
        s, _ = lsock.accept()
    except OSError:
        return
    sid = new_sid()
    if not sid or len(conns) >= CONNS_MAX:
        s.close()
        return
    s.setblocking(False)
    conns[sid] = Conn(sid, s)
    frame(T_OPEN, sid)


def read_client(c):
    try:
        data = c.sock.recv(min(FRAME_MAX, c.window))
    except BlockingIOError:
        return
    except OSError:
        data = b''
    if not data:
        drop(c)
        return
    c.window -= len(data)
    frame(T_DATA, c.sid, data)


def write_client(c):
    try:
        n = c.sock.send(c.buf)
    except BlockingIOError:
        return
    except OSError:
        c.buf.clear()
        drop(c)
        return
    del c.buf[:n]
    c.written += n
    if c.written >= WINDOW // 2 or not c.buf:
        frame(T_WINDOW, c.sid, WIN.pack(c.written))
        c.written = 0
    if not c.buf and c.got_close:
        drop(c)


def other_relays():
    """Pids of the other relays in this sandbox (argv holds 'sbx-relay')."""
    pids = []
    for p in os.listdir('/proc'):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            with open(f'/proc/{p}/cmdline', 'rb') as f:
                if b'sbx-relay' in f.read().split(b'\0'):
                    pids.append(int(p))
        except OSError:
            pass
    return pids


def alive(pid):
    """Whether PID is still a process that has not run its exit (not a zombie)."""
    try:
        with open(f'/proc/{pid}/stat', 'rb') as f:
            return f.read().rsplit(b')', 1)[1].split()[0] != b'Z'
    except (OSError, IndexError):
        return False


def listen():
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A connection of an earlier relay in TIME_WAIT does not hold the port.
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # A killed relay frees the port once it has run its exit, which on a
    # loaded host (a sandbox's CPU quota spent) can take seconds: the relay
    # waits while one it killed is still alive, 10 s at most; once none is,
    # a port still taken is someone else's.
    end = time.monotonic() + 10
    killed = set()
    while True:
        try:
            lsock.bind(('127.0.0.1', PORT))
            return lsock
        except OSError as e:
            if e.errno != errno.EADDRINUSE or not PORT:
                raise
            stale = other_relays()
            killed = {p for p in killed if alive(p)}
            if not stale and not killed or time.monotonic() > end:
                sys.stderr.write(f'sbx-relay: port-in-use {PORT}\n')
                sys.exit(3)
            for pid in stale:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except OSError:
                    pass
            time.sleep(0.02)


def main():
    lsock = listen()
    lsock.listen(128)
    lsock.setblocking(False)
    frame(T_HELLO, 0, json.dumps({'v': 1, 'port': lsock.getsockname()[1],
                                  'pid': os.getpid()}).encode())
    R, W = select.POLLIN, select.POLLOUT
    while True:
        room = len(out) < OUT_HIGH
        p = select.poll()
        who = {IN_FD: 'in'}
        p.register(IN_FD, R)
        if out:
            who[OUT_FD] = 'out'
            p.register(OUT_FD, W)
        if room:
            who[lsock.fileno()] = 'listen'
            p.register(lsock, R)
        for c in conns.values():
            if c.sock is None:
                continue
            m = 0
            if room and c.window > 0 and not c.sent_close:
                m |= R
            if c.buf:
                m |= W
            if m:
                who[c.sock.fileno()] = c
                p.register(c.sock, m)
        for fd, ev in p.poll():
            d = who.get(fd)
            if d == 'in':
                if not read_server():
                    return
            elif d == 'out':
                if not write_server():
                    return
            elif d == 'listen':
                accept(lsock)
            elif d is not None and d.sock is not None:
                if ev & (W | select.POLLERR | select.POLLHUP) and d.buf:
                    write_client(d)
                if d.sock is not None and ev & (R | select.POLLERR | select.POLLHUP):
                    read_client(d)


if __name__ == '__main__':
    try:
        main()
    except KeyboardInterrupt:
        pass
