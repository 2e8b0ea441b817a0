/* SPDX-License-Identifier: MIT */
/* A private engine for one test: the C side of tests/private-engine. */
#include "private-engine.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Hang bounds of one script call: a first start on a machine loads the
 * sandbox image (tens of seconds) and may wait for another run's lock. */
#define START_TIMEOUT_S 900
#define OTHER_TIMEOUT_S 300
#define OWNER_VAR "SBX_PRIVATE_ENGINE_OWNER="

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The environment with OWNER_VAR set to OWNER (malloc'd array; the strings
 * are environ's and *owner_buf's). */
static char **env_with_owner(pid_t owner, char *owner_buf, size_t size)
{
	size_t n = 0, k = 0;
	char **envp;

	while (environ && environ[n])
		n++;
	envp = calloc(n + 2, sizeof(*envp));
	if (!envp)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], OWNER_VAR, strlen(OWNER_VAR)) != 0)
			envp[k++] = environ[i];
	snprintf(owner_buf, size, OWNER_VAR "%ld", (long)(owner ? owner : getpid()));
	envp[k] = owner_buf;
	return envp;
}

/* Read the child's stdout into OUT (kept NUL-terminated, the rest dropped)
 * until it closes or DEADLINE passes; false on the deadline. */
static bool read_until_eof(int fd, char *out, size_t size, double deadline)
{
	size_t len = 0;
	char buf[512];

	for (;;) {
		double left = deadline - now_s();
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t n;

		if (left <= 0)
			return false;
		if (poll(&p, 1, left > 1 ? 1000 : (int)(left * 1000) + 1) < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		if (!p.revents)
			continue;
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return true;
		if (out && len + 1 < size) {
			size_t take = (size_t)n < size - 1 - len ? (size_t)n : size - 1 - len;
			memcpy(out + len, buf, take);
			len += take;
			out[len] = '\0';
		}
	}
}

/* Wait for PID until DEADLINE; false (and *status untouched) on the deadline. */
static bool wait_until(pid_t pid, int *status, double deadline)
{
	for (;;) {
		pid_t w = waitpid(pid, status, WNOHANG);
		if (w == pid || (w < 0 && errno != EINTR))
			return w == pid;
		if (now_s() >= deadline)
			return false;
		nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
	}
}

/* Run the script: CMD TYPE DIR [EXTRA], its stdout into OUT (may be NULL). */
static int run_script(struct private_engine *pe, const char *cmd, const char *extra, int timeout_s,
		      char *out, size_t out_size, struct sbx_error *err)
{
	const char *argv[] = {"bash", pe->script, cmd, pe->type, pe->dir, extra, NULL};
	double start = now_s(), deadline = start + timeout_s;
	char owner[64], **envp;
	int fds[2], status = 0;
	bool in_time;
	pid_t pid;

	if (out && out_size)
		out[0] = '\0';
	envp = env_with_owner(pe->owner, owner, sizeof(owner));
	if (!envp)
		return sbx_error_set(err, -ENOMEM, "private engine: out of memory");
	if (pipe2(fds, O_CLOEXEC) < 0) {
		free(envp);
		return sbx_error_set(err, -errno, "private engine: pipe: %s", strerror(errno));
	}
	pid = fork();
	if (pid < 0) {
		int e = errno;
		close(fds[0]);
		close(fds[1]);
		free(envp);
		return sbx_error_set(err, -e, "private engine: fork: %s", strerror(e));
	}
	if (pid == 0) {
		/* bash SCRIPT: the script's mode bits do not matter. */
		dup2(fds[1], STDOUT_FILENO);
		execve("/bin/bash", (char *const *)argv, envp);
		_exit(127);
	}
	close(fds[1]);
	free(envp);
	in_time = read_until_eof(fds[0], out, out_size, deadline);
	close(fds[0]);
	in_time = in_time && wait_until(pid, &status, deadline);
	pe->seconds = now_s() - start;
	if (!in_time) {
		kill(pid, SIGKILL); /* the script we started; what it started, cleanup removes */
		waitpid(pid, &status, 0);
		return sbx_error_set(err, -ETIMEDOUT, "%s %s %s %s did not finish in %d s",
				     pe->script, cmd, pe->type, pe->dir, timeout_s);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return sbx_error_set(
		    err, -EIO, "%s %s %s %s failed (%s %d; its messages are in the test's log)",
		    pe->script, cmd, pe->type, pe->dir,
		    WIFEXITED(status) ? "exit status" : "signal",
		    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	if (out) {
		size_t n = strlen(out);
		while (n && (out[n - 1] == '\n' || out[n - 1] == '\r'))
			out[--n] = '\0';
	}
	return 0;
}

static void find_script(char *buf, size_t size)
{
	const char *s = getenv("SBX_PRIVATE_ENGINE_SCRIPT"), *src = getenv("SBX_SRCDIR");

	if (s && *s)
		snprintf(buf, size, "%s", s);
	else if (src && *src)
		snprintf(buf, size, "%s/tests/private-engine", src);
	else
		snprintf(buf, size, "tests/private-engine");
}

int private_engine_init(struct private_engine *pe, const char *type, struct sbx_error *err)
{
	char dir[] = "/tmp/sbx-pe-XXXXXX";

	memset(pe, 0, sizeof(*pe));
	if (!type || (strcmp(type, "docker") != 0 && strcmp(type, "podman") != 0))
		return sbx_error_set(err, -EINVAL,
				     "private engine: type must be docker or podman, not %s",
				     type ? type : "(null)");
	find_script(pe->script, sizeof(pe->script));
	if (access(pe->script, R_OK) < 0)
		return sbx_error_set(err, -errno, "private engine: cannot read %s: %s", pe->script,
				     strerror(errno));
	if (!mkdtemp(dir))
		return sbx_error_set(err, -errno, "private engine: mkdtemp %s: %s", dir,
				     strerror(errno));
	snprintf(pe->type, sizeof(pe->type), "%s", type);
	snprintf(pe->dir, sizeof(pe->dir), "%s", dir);
	snprintf(pe->socket, sizeof(pe->socket), "%s/%s.sock", dir, type);
	snprintf(pe->url, sizeof(pe->url), "unix://%s", pe->socket);
	return 0;
}

int private_engine_start(struct private_engine *pe, struct sbx_error *err)
{
	char out[256];
	int r;

	pe->started = true; /* even a failed start may leave something to clean */
	r = run_script(pe, "start", NULL, START_TIMEOUT_S, out, sizeof(out), err);
	if (r < 0)
		return r;
	if (strcmp(out, pe->socket) != 0)
		return sbx_error_set(err, -EPROTO, "%s start printed '%s', not the socket %s",
				     pe->script, out, pe->socket);
	return 0;
}

int private_engine_stop(struct private_engine *pe, struct sbx_error *err)
{
	return run_script(pe, "stop", NULL, OTHER_TIMEOUT_S, NULL, 0, err);
}

int private_engine_kill(struct private_engine *pe, struct sbx_error *err)
{
	return run_script(pe, "kill", NULL, OTHER_TIMEOUT_S, NULL, 0, err);
}

int private_engine_track_label(struct private_engine *pe, const char *key, const char *value,
			       struct sbx_error *err)
{
	char label[512];

	if ((size_t)snprintf(label, sizeof(label), "%s=%s", key, value) >= sizeof(label))
		return sbx_error_set(err, -ENAMETOOLONG, "private engine: label %s too long", key);
	return run_script(pe, "label", label, OTHER_TIMEOUT_S, NULL, 0, err);
}

int private_engine_cleanup(struct private_engine *pe, struct sbx_error *err)
{
	int r;

	if (!pe->started)
		return 0;
	r = run_script(pe, "cleanup", NULL, OTHER_TIMEOUT_S, NULL, 0, err);
	if (r == 0)
		pe->started = false;
	return r;
}

/* The engine cleaned up at exit or on a signal, and the cleanup command made
 * up front (a signal handler may only fork, exec and wait). */
static struct private_engine *exit_pe;
static const char *exit_argv[6];

static void cleanup_at_exit(void)
{
	struct sbx_error err = SBX_ERROR_INIT;

	if (exit_pe && exit_pe->started && private_engine_cleanup(exit_pe, &err) < 0)
		fprintf(stderr, "private engine: cleanup at exit: %s\n", err.msg);
}

static void cleanup_on_signal(int sig)
{
	if (exit_pe && exit_pe->started) {
		pid_t pid = fork();
		if (pid == 0) {
			execve("/bin/bash", (char *const *)exit_argv, environ);
			_exit(127);
		}
		if (pid > 0)
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
		exit_pe->started = false;
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

void private_engine_cleanup_at_exit(struct private_engine *pe)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	struct sigaction sa;

	exit_pe = pe;
	exit_argv[0] = "bash";
	exit_argv[1] = pe->script;
	exit_argv[2] = "cleanup";
	exit_argv[3] = pe->type;
	exit_argv[4] = pe->dir;
	exit_argv[5] = NULL;
	atexit(cleanup_at_exit);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = cleanup_on_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}
