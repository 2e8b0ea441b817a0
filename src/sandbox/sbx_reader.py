# SPDX-License-Identifier: MIT
# mcp-sandbox's file reader: runs inside a sandbox container as the
# sandbox's user, `python3 -u -c PROGRAM sbx-reader ROOT FRAME_MAX IDLE_S`
# (nothing is written into the container), started by the server over the
# engine's exec stream (src/sandbox/reader.c) and kept for the next file, so
# that a download costs no exec. Standard library only. It talks on its
# stdin and stdout alone:
#
#   hello    reader -> server: "sbx-reader 1\n"
#   request  server -> reader: "OFFSET COUNT CREDIT PATHLEN\n" then PATHLEN
#            bytes: a path relative to ROOT (decimal numbers)
#   reply    reader -> server: "CODE SIZE MTIME_NS INO DEV N\n", CODE 0 when
#            the file is open (N = the bytes that follow: COUNT of them from
#            OFFSET, fewer at the file's end); else 2 no such file, 3 not a
#            regular file, 4 a symbolic link on the way, 5 it cannot be
#            opened (the other fields 0). Then, for CODE 0, frames:
#            "HEXLEN\n" and that many bytes, at most FRAME_MAX, ended by
#            "0\n" (early when the file shrank between frames; a file that
#            shrinks under a frame already announced ends the reader, with a
#            line on stderr).
#   credit   server -> reader, while frames go: "+BYTES\n" lets the reader
#            send that many more bytes past CREDIT; "x\n" stops the frames
#            (the reader then sends "0\n").
#
# Every part of ROOT and of the path is opened with O_NOFOLLOW from "/": a
# symbolic link, or a swap of one, is never followed, and the reader reads
# no more than the sandbox's user can. The file's bytes go from OFFSET by
# sendfile(2) into stdout (pread and write where stdout takes no sendfile):
# a range costs what it sends. Code in the sandbox can replace or
# stop this program: the server trusts none of what it says. End of stdin
# (the server went away), a broken pipe, a malformed line or IDLE_S seconds
# without a request end it.
import errno
import os
import select
import stat
import sys

ROOT = sys.argv[2]
FRAME_MAX = int(sys.argv[3])
IDLE_S = int(sys.argv[4])
LINE_MAX = 256
PATH_MAX = 4096
# Folders are opened for search alone (O_PATH): a folder uid 1000 may pass
# through but not list serves as it would to that user.
O_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

pending = bytearray()
# One frame's bytes, read into and written from without a copy in Python.
FRAME = memoryview(bytearray(FRAME_MAX))


def more(timeout):
    """Reads what stdin has within TIMEOUT seconds (None: waits); False when
    nothing came in time. Ends the program at end of input."""
    if timeout is not None and not select.select([0], [], [], timeout)[0]:
        return False
    data = os.read(0, 65536)
    if not data:
        sys.exit(0)
    pending.extend(data)
    return True


def line(timeout):
    """One line (without its newline), or None when none came within TIMEOUT."""
    while True:
        i = pending.find(b'\n')
        if i >= 0:
            text = bytes(pending[:i])
            del pending[:i + 1]
            return text
        if len(pending) > LINE_MAX:
            sys.exit(2)
        if not more(timeout):
            return None


def exact(n):
    while len(pending) < n:
        if not more(IDLE_S):
            sys.exit(0)
    data = bytes(pending[:n])
    del pending[:n]
    return data


def write_all(*parts):
    """Writes PARTS in order (one writev while the pipe takes them)."""
    views = [memoryview(p) for p in parts]
    while views:
        n = os.writev(1, views)
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if views and n:
            views[0] = views[0][n:]


# sendfile(2) from the file into stdout (the exec's pipe): the bytes do not
# pass through this process. Off for good after the first refusal (stdout or
# the file's filesystem takes no splice, or a seccomp profile forbids it):
# pread and write then send from the same place.
SENDFILE = [True]
NO_SENDFILE = (errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP)


def send_file(fd, pos, count):
    """Sends COUNT bytes of FD from POS, all of them: a file that shrinks
    under a frame already announced ends the program (the server takes the
    cut frame as the reader's failure)."""
    while count > 0:
        got = 0
        if SENDFILE[0]:
            try:
                got = os.sendfile(1, fd, pos, count)
            except OSError as e:
                if e.errno not in NO_SENDFILE:
                    raise
                SENDFILE[0] = False
                continue
        else:
            got = os.preadv(fd, [FRAME[:count]], pos)
            if got:
                write_all(FRAME[:got])
        if not got:
            os.write(2, b'sbx-reader: the file shrank under a frame\n')
            sys.exit(1)
        pos += got
        count -= got


def why(dir_fd, name, last, e):
    """The code for a part that could not be opened as asked (E)."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except OSError as e2:
        return 5 if e2.errno == errno.EACCES else 2
    if stat.S_ISLNK(st.st_mode):
        return 4
    if not last:
        return 5 if e.errno == errno.EACCES and stat.S_ISDIR(st.st_mode) else 2
    if not stat.S_ISREG(st.st_mode):
        return 3
    return 5


def open_file(path):
    """(code, fd): every part opened without following a link."""
    names = [p for p in ROOT.split('/') if p] + path.split('/')
    if any(name in ('', '.', '..') or '\0' in name for name in names):
        return 2, -1
    fd = os.open('/', O_DIR)
    try:
        for i, name in enumerate(names):
            last = i == len(names) - 1
            try:
                nfd = os.open(name, O_FILE if last else O_DIR, dir_fd=fd)
            except OSError as e:
                return why(fd, name, last, e), -1
            os.close(fd)
            fd = nfd
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 3, -1
        nfd, fd = fd, -1
        return 0, nfd
    finally:
        if fd >= 0:
            os.close(fd)


def serve(offset, count, credit, path):
    code, fd = open_file(path)
    if code:
        write_all(b'%d 0 0 0 0 0\n' % code)
        return
    try:
        st = os.fstat(fd)
        n = max(0, min(count, st.st_size - offset))
        # A time before 1970 is told as 0: the server takes no sign.
        write_all(b'0 %d %d %d %d %d\n' % (st.st_size, max(0, st.st_mtime_ns), st.st_ino,
                                           st.st_dev, n))
        pos = offset
        while n > 0:
            # Credit and stop lines: waited for only when the credit is used.
            text = line(0 if credit > 0 else IDLE_S)
            while text is not None:
                if text == b'x':
                    n = 0
                    break
                if text[:1] != b'+' or not text[1:].isdigit():
                    sys.exit(2)
                credit += int(text[1:])
                text = line(0)
            if n == 0:
                break
            if credit <= 0:
                sys.exit(0)  # no credit within IDLE_S: the server is gone
            want = min(n, credit, FRAME_MAX)
            if SENDFILE[0] and os.fstat(fd).st_size >= pos + want:
                write_all(b'%x\n' % want)
                send_file(fd, pos, want)
                got = want
            else:
                got = os.preadv(fd, [FRAME[:want]], pos)
                if not got:
                    break  # it shrank
                write_all(b'%x\n' % got, FRAME[:got])
            pos += got
            n -= got
            credit -= got
        write_all(b'0\n')
    finally:
        os.close(fd)


def main():
    write_all(b'sbx-reader 1\n')
    while True:
        text = line(IDLE_S)
        if text is None:
            return
        if text == b'x' or (text[:1] == b'+' and text[1:].isdigit()):
            continue  # a stop or credit that crossed the end of a reply
        fields = text.split(b' ')
        if len(fields) != 4 or not all(f.isdigit() for f in fields):
            sys.exit(2)
        offset, count, credit, plen = (int(f) for f in fields)
        if plen < 1 or plen > PATH_MAX:
            sys.exit(2)
        path = os.fsdecode(exact(plen))
        serve(offset, count, credit, path)


try:
    main()
except BrokenPipeError:
    pass
