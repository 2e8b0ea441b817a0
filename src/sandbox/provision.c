/* SPDX-License-Identifier: MIT */
/*
 * A sandbox's container: its id (sbx_sandbox_make_id), its making
 * (sbx_container_provision, the one place a container is made, for a cold
 * create and the pool alike, with the checks that the engine took what
 * was asked and can bound its disk), and finding it in the engine's list
 * (sbx_summary_find). For the manager, the pool and the watch.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "egress/egress.h"
#include "sandbox-internal.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/crypto.h"

/*
 * RLIMIT_NPROC counts every process of a uid on the engine host, and on a
 * rootful engine every sandbox runs as the same uid 1000: a small limit would
 * be one pool that all sandboxes drain together. It is set above what all of
 * them may hold together (each sandbox's pids_limit is its own cgroup's), so
 * that the per-sandbox pids limit is the one that binds.
 */
int64_t sbx_sandbox_nproc(const struct sbx_settings *s)
{
	const int64_t pid_max_limit = 4194304; /* the kernel's PID_MAX_LIMIT */
	int64_t n = s->sandbox.max_sandboxes + s->sandbox.pool_size;

	if (s->sandbox.pids_limit > (pid_max_limit - 1024) / n)
		return pid_max_limit;
	return s->sandbox.pids_limit * n + 1024;
}

static const char *const sleep_cmd[] = {"sleep", "infinity", NULL};
static const char *const drop_all[] = {"ALL", NULL};

int sbx_sandbox_make_id(char id[SBX_SANDBOX_ID_MAX + 1], struct sbx_error *err)
{
	unsigned char raw[6];
	int r = sbx_random_bytes(raw, sizeof(raw));

	if (r < 0)
		return sbx_error_set(err, r, "no random bytes for a sandbox id: %s", strerror(-r));
	sbx_hex_encode(raw, sizeof(raw), id);
	return 0;
}

/* sbx_containers_remove's view of a listing: a container removed (or
 * gone) has its id emptied, so that those left can be tried again. */
static const char *summary_id(void *ctx, size_t i)
{
	struct sbx_container_summary *cs = ctx;

	return cs[i].id && cs[i].id[0] ? cs[i].id : NULL;
}

static void summary_removed(void *ctx, size_t i, int r)
{
	struct sbx_container_summary *cs = ctx;

	if (r >= 0 || r == -ENOENT)
		cs[i].id[0] = '\0';
}

void sbx_remove_labelled(sbx_manager *m, const char *id, bool again)
{
	struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, m->instance}, {SBX_LABEL_ID, id}};
	struct sbx_container_summary *cs = NULL;
	size_t n = 0;
	bool failed = false;

	if (sbx_container_list(m->engine, want, id ? 2 : 1, &cs, &n, NULL) < 0)
		return;
	sbx_containers_remove(m->engine, n, summary_id, summary_removed, cs);
	for (size_t i = 0; i < n; i++)
		failed |= summary_id(cs, i) != NULL;
	if (failed && again) {
		sleep(1); /* one more round after a refusal (a restarting engine) */
		sbx_containers_remove(m->engine, n, summary_id, NULL, cs);
	}
	sbx_container_list_free(cs, n);
}

int sbx_disk_check(const struct sbx_settings *s, sbx_engine *e, struct sbx_error *err)
{
	struct sbx_engine_storage st = {0};
	int r;

	if (s->sandbox.disk <= 0)
		return 0;
	r = sbx_engine_storage(e, &st, err);
	if (r < 0) {
		sbx_error_prefix(err, "ask the %s engine how it stores containers (sandbox.disk)",
				 sbx_engine_name(e));
		return r;
	}
	if (!st.size_bound)
		r = sbx_error_set(
		    err, -ENOTSUP,
		    "sandbox.disk (%lld MiB) cannot be enforced: the %s engine keeps containers "
		    "with the %s storage driver%s%s, which cannot bound a container's disk. Give "
		    "the engine btrfs with quotas, overlay on XFS mounted with pquota, or zfs "
		    "(README: \"Disk\"), or set sandbox.disk = 0 to run sandboxes without a "
		    "disk bound",
		    (long long)(s->sandbox.disk >> 20), sbx_engine_name(e), st.driver,
		    *st.backing_fs ? " on " : "", st.backing_fs);
	sbx_engine_storage_release(&st);
	return r;
}

/* The network a sandbox is given: sandbox.network, "none" when empty. */
static const char *sandbox_network(const struct sbx_settings *s)
{
	return s->sandbox.network[0] ? s->sandbox.network : "none";
}

int sbx_places_check(const struct sbx_settings *s, sbx_engine *e, sbx_report_fn report,
		     void *userdata, struct sbx_error *err)
{
	/* As sandbox_create makes a sandbox, in what its places could undo. */
	const struct sbx_container_spec spec = {
	    .image = s->sandbox.image,
	    .user = SBX_SANDBOX_USER,
	    .cap_drop = drop_all,
	    .no_new_privileges = true,
	    .network_mode = sandbox_network(s),
	    .init = true,
	    .runtime = s->sandbox.runtime[0] ? s->sandbox.runtime : NULL,
	};
	int r = sbx_engine_verify(e, &spec, report, userdata, err);

	if (r < 0)
		sbx_error_prefix(err, "the %s engine cannot run sandboxes as configured",
				 sbx_engine_name(e));
	return r;
}

/* sbx_disk_check once per manager: kept once it passed (an engine's storage
 * does not change under it); a failure is kept for a second, then asked
 * again (so that a failing engine is not asked once per create). */
static int manager_disk_check(sbx_manager *m, struct sbx_error *err)
{
	int r = 0;

	pthread_mutex_lock(&m->disk_lock);
	if (!m->disk_checked) {
		if (!m->disk_failed || sbx_seconds_since(&m->disk_failed_at) >= 1.0) {
			sbx_error_clear(&m->disk_err);
			r = sbx_disk_check(m->s, m->engine, &m->disk_err);
			m->disk_checked = r >= 0;
			m->disk_failed = r < 0;
			clock_gettime(CLOCK_MONOTONIC, &m->disk_failed_at);
		}
		if (m->disk_failed) {
			r = m->disk_err.code < 0 ? m->disk_err.code : -EIO;
			if (err)
				*err = m->disk_err;
		}
	}
	pthread_mutex_unlock(&m->disk_lock);
	return r;
}

/* What was asked for the container took (SPEC): its limits (an engine may
 * accept them and apply none: sandbox.allow_unlimited says whether to run
 * such a sandbox), and sandbox.runtime (an engine may accept a runtime it
 * then ignores: Podman 4.3's REST API takes a container's runtime and runs
 * the service's default, which would run sandboxes under a weaker runtime
 * than the one configured without a word). 0, or -ENOTSUP saying so. */
static int took_check(sbx_manager *m, const char *cid, const struct sbx_container_spec *spec,
		      struct sbx_error *err)
{
	const char *want = m->s->sandbox.runtime;
	struct sbx_container_info ci = {0};
	char dropped[96] = "";
	int r;

	r = sbx_container_inspect(m->engine, cid, &ci, err);
	if (r < 0)
		return r;
	/* Limits the engine took and did not apply (rootless Podman on cgroup
	 * v1 only warns): one sandbox could take the host. */
	if (spec->memory_bytes > 0 && ci.memory_bytes != spec->memory_bytes)
		strcat(dropped, " memory (sandbox.memory)");
	if (spec->nano_cpus > 0 && ci.nano_cpus != spec->nano_cpus)
		strcat(dropped, " CPU (sandbox.cpus)");
	if (spec->pids_limit > 0 && ci.pids_limit != spec->pids_limit)
		strcat(dropped, " processes (sandbox.pids_limit)");
	if (dropped[0] && !m->s->sandbox.allow_unlimited)
		r = sbx_error_set(
		    err, -ENOTSUP,
		    "the %s engine created the sandbox without its limits (or with others) on%s: "
		    "it cannot apply them (rootless Podman on a cgroup v1 host cannot), so one "
		    "sandbox "
		    "could take the host's memory, CPU or processes. Use a rootful engine or a "
		    "cgroup v2 host, or set sandbox.allow_unlimited = true to run sandboxes "
		    "without limits (trusted use only)",
		    sbx_engine_name(m->engine), dropped);
	else if (want[0] && (!ci.runtime || strcmp(ci.runtime, want) != 0))
		r = sbx_error_set(
		    err, -ENOTSUP,
		    "the %s engine runs the sandbox with the runtime %s, not %s "
		    "(sandbox.runtime): it ignores a container's runtime (Podman 4.3's "
		    "API does; make %s the engine's default runtime instead, and leave "
		    "sandbox.runtime empty)",
		    sbx_engine_name(m->engine), ci.runtime ? ci.runtime : "(none)", want, want);
	sbx_container_info_release(&ci);
	return r;
}

/* The asleep mark's part of a container's name: ".asleep-" and the Unix
 * time it fell asleep. */
#define ASLEEP_MARK ".asleep-"

int sbx_container_name(sbx_manager *m, const char *id, time_t asleep_since, char *buf, size_t size)
{
	int n = asleep_since > 0 ? snprintf(buf, size, "mcp-sbx-%s-%s" ASLEEP_MARK "%lld",
					    m->instance, id, (long long)asleep_since)
				 : snprintf(buf, size, "mcp-sbx-%s-%s", m->instance, id);

	if (n < 0 || (size_t)n >= size || n > SBX_CONTAINER_NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

time_t sbx_container_asleep_since(sbx_manager *m, const char *id, const char *name)
{
	char base[SBX_CONTAINER_NAME_MAX + 1];
	const char *p;
	size_t n;
	time_t t = 0;

	if (!name || sbx_container_name(m, id, 0, base, sizeof(base)) < 0)
		return 0;
	n = strlen(base);
	if (strncmp(name, base, n) != 0 || strncmp(name + n, ASLEEP_MARK, strlen(ASLEEP_MARK)) != 0)
		return 0;
	p = name + n + strlen(ASLEEP_MARK);
	/* 1 to 12 digits, nothing after: a time from 1970 to year 33658. */
	for (n = 0; p[n] >= '0' && p[n] <= '9' && n < 13; n++)
		t = t * 10 + (p[n] - '0');
	return n >= 1 && n <= 12 && p[n] == '\0' ? t : 0;
}

int sbx_sandbox_mark_asleep(sbx_sandbox *sb, time_t asleep_since, struct sbx_error *err)
{
	char name[SBX_CONTAINER_NAME_MAX + 1];
	int r = sbx_container_name(sb->m, sb->id, asleep_since, name, sizeof(name));

	if (r < 0)
		return sbx_error_set(err, r, "sandbox %s: its container name is too long", sb->id);
	return sbx_container_rename(sb->m->engine, sb->container, name, err);
}

int sbx_container_provision(sbx_manager *m, const char *id, time_t when, const char *name,
			    const char *owner, int64_t memory, int64_t nano_cpus,
			    char **ret_container, struct sbx_error *err)
{
	const struct sbx_settings *s = m->s;
	char created[32];
	struct sbx_kv labels[6] = {
	    {SBX_LABEL_MANAGED, "1"},
	    {SBX_LABEL_INSTANCE, m->instance},
	    {SBX_LABEL_ID, id},
	    {SBX_LABEL_CREATED, created},
	};
	size_t n_labels = 4;
	int64_t nproc = sbx_sandbox_nproc(s);
	struct sbx_ulimit ulimits[] = {{"nofile", 1024, 1024}, {"nproc", nproc, nproc}};
	char cname[SBX_CONTAINER_NAME_MAX + 1];
	char *cid = NULL, **env = NULL;
	int r;

	r = manager_disk_check(m, err);
	if (r < 0)
		return r;
	/* The egress relay's proxy variables, for every process in it. */
	r = sbx_egress_container_env(m->s, &env, err);
	if (r < 0)
		return r;
	snprintf(created, sizeof(created), "%lld", (long long)when);
	if (owner) {
		labels[n_labels++] = (struct sbx_kv){SBX_LABEL_NAME, name ? name : id};
		labels[n_labels++] = (struct sbx_kv){SBX_LABEL_OWNER, owner};
	} else {
		labels[n_labels++] = (struct sbx_kv){SBX_LABEL_POOL, "1"};
	}
	if (sbx_container_name(m, id, 0, cname, sizeof(cname)) < 0) {
		sbx_strv_free(env);
		return sbx_error_set(err, -EINVAL, "sandbox %s: its container name is too long",
				     id);
	}
	struct sbx_container_spec spec = {
	    .image = s->sandbox.image,
	    .name = cname,
	    .cmd = sleep_cmd,
	    .env = (const char *const *)env,
	    .labels = labels,
	    .n_labels = n_labels,
	    .workdir = SBX_RESULTS_DIR,
	    .user = SBX_SANDBOX_USER,
	    .memory_bytes = memory,
	    .nano_cpus = nano_cpus,
	    .pids_limit = s->sandbox.pids_limit,
	    .cap_drop = drop_all,
	    .no_new_privileges = true,
	    .network_mode = sandbox_network(s),
	    .ulimits = ulimits,
	    .n_ulimits = SBX_ARRAY_SIZE(ulimits),
	    .init = true,
	    .runtime = s->sandbox.runtime[0] ? s->sandbox.runtime : NULL,
	    .disk_bytes = s->sandbox.disk,
	};
	r = sbx_container_create(m->engine, &spec, &cid, err);
	sbx_strv_free(env);
	if (r < 0) {
		sbx_remove_labelled(m, id, false);
		if (r == -ENOENT && sbx_image_exists(m->engine, s->sandbox.image, NULL) == 0)
			sbx_error_prefix(err, "the sandbox image %s is missing on the %s engine",
					 s->sandbox.image, sbx_engine_name(m->engine));
		return r;
	}
	r = took_check(m, cid, &spec, err);
	if (r < 0) {
		sbx_container_remove(m->engine, cid, NULL);
		free(cid);
		return r;
	}
	r = sbx_container_start(m->engine, cid, err);
	if (r < 0 && err && strstr(err->msg, "rlimit"))
		sbx_error_prefix(
		    err,
		    "the engine host's hard process limit (RLIMIT_NPROC) is below %lld "
		    "= sandbox.pids_limit x (sandbox.max_sandboxes + sandbox.pool_size) "
		    "+ 1024: lower those settings or raise the engine's limit",
		    (long long)nproc);
	if (r < 0) {
		sbx_error_prefix(err, "start the sandbox container");
		sbx_container_remove(m->engine, cid, NULL);
		free(cid);
		return r;
	}
	/* Whatever else a sandbox needs before its first use goes here, so that
	 * pooled and cold sandboxes are made alike. */
	*ret_container = cid;
	return 0;
}

const struct sbx_container_summary *sbx_summary_find(const struct sbx_container_summary *cs,
						     size_t n, const char *container)
{
	for (size_t i = 0; container && i < n; i++) {
		size_t len = cs[i].id ? strlen(cs[i].id) : 0;
		if (len >= 12 && strncmp(cs[i].id, container, len) == 0)
			return &cs[i];
	}
	return NULL;
}
