# SPDX-License-Identifier: MIT
# mcp-sandbox's persistent interpreter: runs inside a sandbox container as
# `python3 -u -c PROGRAM` (nothing is written into the container), started once per sandbox over the engine's
# exec stream (src/sandbox/interp.c). Standard library only.
#
# Protocol: one JSON object per line. The server writes requests to this
# process's stdin; this process answers on its stdout. Both are moved to
# private close-on-exec fds at start, so the user's code (its prints, C
# extensions, subprocesses) never reaches them: fd 0 becomes /dev/null and
# fds 1 and 2 become pipes drained by a pump thread that forwards the text.
#
#   -> {"op": "run", "id": N, "code": S, "cap": BYTES, "img": BYTES, "img_total": BYTES}
#   -> {"op": "int", "id": N}          interrupt call N (KeyboardInterrupt)
#   -> {"op": "kill"}                  end the interpreter and its process group
#   <- {"t": "hello", "v": 1, "pid": P, "pgid": G, "py": "3.11.4"}
#   <- {"t": "a", "id": N}                          call N starts (the code runs next)
#   <- {"t": "o", "id": N, "fd": 1|2, "s": TEXT}    output of call N, as produced
#   <- {"t": "i", "id": N, "p": PATH, "b": BASE64}  an image among call N's files
#   <- {"t": "r", "id": N, "rc": RC, "trunc": B, "intr": B, "more": B,
#       "files": [{"p": PATH, "s": SIZE}], "rm": B}
#
# Output beyond "cap" bytes per call is read and dropped ("trunc"). Files
# created or modified under /app/results during the call (recursively, by
# ns mtime and size) are listed in the result, at most 100; PNG/JPEG files
# up to "img" bytes (and "img_total" per call) come with their bytes, each in
# a line of its own just before the result; "rm" says files there were
# removed. The server trusts none of it
# (the user's code runs in this process and can write these lines itself):
# it checks every path, every image's bytes and sizes, and each line's length.
# End of stdin (the server went away) ends the process group too. "int" and
# "kill" are handled by a reader thread, so they work while code runs (unless
# it holds the GIL in C; then the server kills the process with an exec).
import base64
import codecs
import fcntl
import importlib
import json
import linecache
import os
import queue
import select
import signal
import stat
import sys
import threading
import time
import traceback
import types

RESULTS = '/app/results'
FILES_MAX = 100
PATH_MAX = 1024
SCAN_MAX = 20000
CHUNK = 65536
COALESCE_S = 0.001  # the pump's wait before forwarding a call's first output

PROTO_IN = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 100)
PROTO_OUT = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 100)
SEND_LOCK = threading.Lock()  # the protocol fd, the pipes and CUR


class Call:
    def __init__(self, req):
        self.id = req['id']
        self.cap = max(0, int(req.get('cap', 1 << 20)))
        self.img = max(0, int(req.get('img', 0)))
        self.img_total = max(0, int(req.get('img_total', 0)))
        self.total = 0
        self.trunc = False
        self.running = False
        self.interrupted = False
        self.dec = {1: codecs.getincrementaldecoder('utf-8')('replace'),
                    2: codecs.getincrementaldecoder('utf-8')('replace')}


CUR = None
MAIN_IDENT = threading.get_ident()


def write_all(b):
    while b:
        b = b[os.write(PROTO_OUT, b):]


def send(obj, out=None):
    # Writes the line now, or appends it to the list out (written later in
    # one piece by the caller).
    b = (json.dumps(obj, ensure_ascii=False, separators=(',', ':')) + '\n').encode(
        'utf-8', 'surrogatepass')
    if out is not None:
        out.append(b)
    else:
        write_all(b)


def setup_stdio():
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    pipes = {}
    for n in (1, 2):
        r, w = os.pipe()
        os.dup2(w, n)  # inheritable: subprocesses write to the same pipe
        os.close(w)
        os.set_blocking(r, False)
        pipes[r] = n
    return pipes


def forward(c, n, b, final=False, out=None):
    # Under SEND_LOCK. Counts b against the call's cap and sends what fits.
    if c is None:
        return
    keep = b[:max(0, c.cap - c.total)]
    c.total += len(b)
    if len(keep) < len(b):
        c.trunc = True
    s = c.dec[n].decode(keep, final)
    if s:
        send({'t': 'o', 'id': c.id, 'fd': n, 's': s}, out)


def drain(pipes, fds, out=None):
    # Under SEND_LOCK: reads what the pipes hold now.
    for fd in fds:
        while True:
            try:
                b = os.read(fd, CHUNK)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            if not b:
                break
            forward(CUR, pipes[fd], b, out=out)
            if len(b) < CHUNK:
                break


def pump(pipes):
    waited_for = None
    while True:
        try:
            ready = select.select(list(pipes), [], [])[0]
        except InterruptedError:
            continue
        c = CUR
        if c is not None and c is not waited_for:
            # Once per call: a short call ends meanwhile and run() sends its
            # output with the result in one write (print's text and newline
            # are two writes otherwise); later output is not held back.
            waited_for = c
            time.sleep(COALESCE_S)
            ready = list(pipes)
        with SEND_LOCK:
            drain(pipes, ready)


def on_sigint(signum, frame):
    c = CUR
    if c is not None and c.running:
        raise KeyboardInterrupt


def die():
    # Ends this interpreter and what it started (its process group).
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    finally:
        os._exit(137)


def reader(q):
    buf = b''
    while True:
        try:
            b = os.read(PROTO_IN, CHUNK)
        except InterruptedError:
            continue
        except OSError:
            b = b''
        if not b:
            die()  # the server went away
        buf += b
        while b'\n' in buf:
            line, _, buf = buf.partition(b'\n')
            try:
                req = json.loads(line)
            except ValueError:
                continue
            if req.get('op') == 'int':
                with SEND_LOCK:
                    c = CUR
                    if c is not None and c.id == req.get('id') and c.running \
                            and not c.interrupted:
                        c.interrupted = True
                        signal.pthread_kill(MAIN_IDENT, signal.SIGINT)
            elif req.get('op') == 'kill':
                die()
            elif req.get('op') == 'run':
                q.put(req)


def snapshot():
    s = {}
    todo = [RESULTS]
    while todo and len(s) < SCAN_MAX:
        d = todo.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    todo.append(e.path)
                elif stat.S_ISREG(st.st_mode):
                    s[e.path[len(RESULTS) + 1:]] = (st.st_mtime_ns, st.st_size)
                    if len(s) >= SCAN_MAX:
                        break
    return s


IMAGE_MAGIC = ((b'\x89PNG\r\n\x1a\n', 'image/png'), (b'\xff\xd8\xff', 'image/jpeg'))


def valid_name(k):
    # The server refuses the rest: a name that is not UTF-8 (it has no link)
    # or holds control characters.
    try:
        b = k.encode('utf-8')
    except UnicodeEncodeError:
        return False
    return len(b) <= PATH_MAX and not any(ch < 0x20 or ch == 0x7f for ch in b)


def changed_files(c, before):
    # The changed files, and the images among them as their own lines (one
    # line per image keeps every protocol line small).
    after = snapshot()
    ch = sorted(k for k in after if before.get(k) != after[k])
    ok = [k for k in ch if valid_name(k)]
    files, images, budget = [], [], c.img_total
    for k in ok[:FILES_MAX]:
        size = after[k][1]
        files.append({'p': k, 's': size})
        if 0 < size <= min(c.img, budget) and \
                k.lower().endswith(('.png', '.jpg', '.jpeg')):
            try:
                with open(os.path.join(RESULTS, k), 'rb') as fh:
                    data = fh.read(c.img + 1)
            except OSError:
                data = b''
            for magic, mime in IMAGE_MAGIC:
                if 0 < len(data) <= min(c.img, budget) and data.startswith(magic):
                    images.append({'t': 'i', 'id': c.id, 'p': k,
                                   'b': base64.b64encode(data).decode('ascii')})
                    budget -= len(data)
                    break
    return files, images, len(ch) > len(files), any(k not in after for k in before)


def exit_code(e):
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xff if e.code >= 0 else e.code
    print(e.code, file=sys.stderr)
    return 1


def run_user(c, g, code, name):
    # The code's exit status; tracebacks go to fd 2 without this frame.
    try:
        c.running = True
        obj = compile(code, name, 'exec')
        exec(obj, g)
        c.running = False
        return 0
    except SystemExit as e:
        c.running = False
        return exit_code(e)
    except BaseException as e:
        c.running = False
        tb = e.__traceback__
        if tb is not None and tb.tb_frame.f_code is run_user.__code__:
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        return 1


def flush_std():
    for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            f.flush()
        except Exception:
            pass


def run(req, g, pipes):
    global CUR
    c = Call(req)
    code = req.get('code', '')
    name = '<code>'
    rc, files, images, more, removed = 1, [], [], False, False
    try:
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        before = snapshot()
        importlib.invalidate_caches()  # see packages installed since the last call
        signal.signal(signal.SIGINT, on_sigint)
        with SEND_LOCK:
            CUR = c
            send({'t': 'a', 'id': c.id})
        try:
            rc = run_user(c, g, code, name)
        except KeyboardInterrupt:  # arrived between the code's end and run_user's return
            rc = 1
        c.running = False
        flush_std()
        files, images, more, removed = changed_files(c, before)
    finally:
        c.running = False
        with SEND_LOCK:
            # The last output and the result in one write: one trip through
            # the engine's stream instead of one per line.
            out = []
            drain(pipes, list(pipes), out)
            for n in (1, 2):
                forward(c, n, b'', True, out)
            CUR = None
            for img in images:
                send(img, out)
            send({'t': 'r', 'id': c.id, 'rc': rc, 'trunc': c.trunc, 'intr': c.interrupted,
                  'files': files, 'more': more, 'rm': removed}, out)
            write_all(b''.join(out))


def main():
    try:
        os.setsid()
    except OSError:
        pass
    pipes = setup_stdio()
    try:
        os.chdir(RESULTS)
    except OSError:
        pass
    mod = types.ModuleType('__main__')
    mod.__dict__['__builtins__'] = __builtins__
    sys.modules['__main__'] = mod
    sys.argv = ['']
    sys.path[0] = ''
    q = queue.Queue()
    threading.Thread(target=pump, args=(pipes,), daemon=True).start()
    threading.Thread(target=reader, args=(q,), daemon=True).start()
    signal.signal(signal.SIGINT, on_sigint)
    with SEND_LOCK:
        send({'t': 'hello', 'v': 1, 'pid': os.getpid(), 'pgid': os.getpgid(0),
              'py': '%d.%d.%d' % sys.version_info[:3]})
    while True:
        try:
            req = q.get()
        except KeyboardInterrupt:
            continue
        try:
            run(req, mod.__dict__, pipes)
        except KeyboardInterrupt:
            pass


def list_files(most):
    # `python3 -c PROGRAM sbx-list MOST` (src/sandbox/files.c): the regular
    # files under RESULTS as snapshot() finds them, as lines on stdout:
    # "more B" (B: 1 when some were left out), then "SIZE MTIME_NS PATH" for
    # each file (sorted, at most MOST). A valid name holds no control
    # character, so each line is one file.
    s = snapshot()
    ok = sorted(k for k in s if valid_name(k))
    lines = ['more %d' % (len(ok) > most or len(s) >= SCAN_MAX)]
    lines += ['%d %d %s' % (s[k][1], s[k][0], k) for k in ok[:most]]
    write_all(('\n'.join(lines) + '\n').encode('utf-8'))


if sys.argv[1:2] == ['sbx-list']:
    list_files(int(sys.argv[2]))
else:
    main()
