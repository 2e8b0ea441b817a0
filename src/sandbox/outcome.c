/* SPDX-License-Identifier: MIT */
/*
 * What became of a run in a sandbox, for the files that run things (exec.c,
 * interp.c, packages.c): whether its container stopped under it, whether
 * the kernel's OOM killer struck, whether the output says the disk is full,
 * the sentences that say so, and the run result's release. Below them all:
 * it calls the engine and nothing else of the manager.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox-internal.h"
#include "sbx/common.h"

void sbx_run_result_release(struct sbx_run_result *r)
{
	if (!r)
		return;
	sbx_buf_release(&r->out);
	sbx_buf_release(&r->err);
	for (size_t i = 0; i < r->n_files; i++) {
		free(r->files[i].path);
		free(r->files[i].image);
	}
	free(r->files);
	free(r->notice);
	memset(r, 0, sizeof(*r));
}

int sbx_sandbox_stopped(sbx_manager *m, sbx_sandbox *sb, int settle_ms, struct sbx_error *err)
{
	for (int waited = 0;; waited += 100) {
		struct sbx_container_info ci = {0};
		enum sbx_end end;
		int q;
		bool stopped;

		/* Ended by the server itself (deleted, reaped): stopped, whatever
		 * an engine busy removing it answers (callers then say why). */
		pthread_mutex_lock(&m->lock);
		end = sb->end;
		pthread_mutex_unlock(&m->lock);
		if (end != SBX_END_NONE)
			return 1;
		q = sbx_container_inspect(m->engine, sb->container, &ci, err);
		stopped = q == -ENOENT || (q >= 0 && !ci.running);

		sbx_container_info_release(&ci);
		if (stopped)
			return 1;
		if (q < 0 || waited >= settle_ms)
			return q < 0 ? q : 0;
		usleep(100000);
	}
}

/* cgroup v2 (memory.events) or v1 (memory.oom_control): "oom_kill N". */
static const char oom_count_sh[] =
    "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null";

int sbx_sandbox_oom_since(sbx_manager *m, sbx_sandbox *sb)
{
	const char *const argv[] = {"sh", "-c", oom_count_sh, NULL};
	struct sbx_exec_spec spec = {
	    .argv = argv, .user = SBX_SANDBOX_USER, .timeout_ms = 10000, .output_cap = 4096};
	struct sbx_exec_result res = {0};
	const char *p;
	long long n = -1;
	int r;

	if (sbx_exec(m->engine, sb->container, &spec, &res, NULL) < 0)
		return -EIO;
	for (p = res.out.data; p && (p = strstr(p, "oom_kill ")); p += 9)
		if (p == res.out.data || p[-1] == '\n') {
			n = strtoll(p + 9, NULL, 10);
			break;
		}
	sbx_exec_result_release(&res);
	if (n < 0)
		return -ENOENT;
	pthread_mutex_lock(&m->lock);
	r = n > sb->oom_kills;
	sb->oom_kills = n;
	pthread_mutex_unlock(&m->lock);
	return r;
}

void sbx_memory_limit_text(const sbx_manager *m, const sbx_sandbox *sb, char *buf, size_t size)
{
	int64_t limit = sb->memory > 0 ? sb->memory : m->s->sandbox.memory;

	snprintf(buf, size, "%lld MiB (%s)", (long long)(limit >> 20),
		 limit < m->s->sandbox.memory ? "the memory quota of its tenant"
					      : "sandbox.memory");
}

int sbx_oom_notice(const sbx_manager *m, const sbx_sandbox *sb, const char *what, char **ret_notice)
{
	char limit[96];

	sbx_memory_limit_text(m, sb, limit, sizeof(limit));
	return sbx_str_replacef(
	    ret_notice,
	    "%s ran out of memory: the kernel killed it (or a process it started) at the "
	    "sandbox's memory limit of %s. Use less memory, for example by working on the data "
	    "in parts.",
	    what, limit);
}

bool sbx_says_out_of_disk(const struct sbx_buf *b)
{
	return b->data && (strstr(b->data, "No space left on device") ||
			   strstr(b->data, "Disk quota exceeded"));
}
