/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pkg-index.h"

static pid_t index_pid = -1;
static char index_root[64];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int pkg_index_start(const char *name, char *url, size_t size)
{
	char script[512], line[32] = "";
	const char *src = getenv("SBX_SRCDIR");
	int fds[2];
	ssize_t n;

	snprintf(index_root, sizeof(index_root), "/tmp/sbx-%s-index-XXXXXX", name);
	if (!mkdtemp(index_root) || pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	snprintf(script, sizeof(script), "%s/tests/pkgindex.py", src ? src : ".");
	index_pid = fork();
	if (index_pid == 0) {
		dup2(fds[1], 1);
		execlp("python3", "python3", script, index_root, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	/* The whole line: an unbuffered python writes the newline on its own. */
	for (size_t got = 0; got < sizeof(line) - 1 && !strchr(line, '\n'); got += (size_t)n) {
		n = read(fds[0], line + got, sizeof(line) - 1 - got);
		if (n <= 0)
			break;
	}
	close(fds[0]);
	if (atoi(line) <= 0)
		return -EIO;
	snprintf(url, size, "http://127.0.0.1:%d/simple/", atoi(line));
	return 0;
}

const char *pkg_index_root(void)
{
	return index_root;
}

void pkg_index_stop(void)
{
	if (index_pid > 0) {
		kill(index_pid, SIGTERM);
		waitpid(index_pid, NULL, 0);
		index_pid = -1;
	}
	if (index_root[0])
		nftw(index_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
