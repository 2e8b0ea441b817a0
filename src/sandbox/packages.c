/* SPDX-License-Identifier: MIT */
/*
 * Packages: checking a pip requirement spec, installing it in the
 * background with `pip install` (argv, never a shell), and telling how an
 * install went or whether a package is there.
 *
 * An install is a record on the sandbox (under m->lock) and a detached
 * thread holding a reference to the sandbox. The thread runs pip with
 * sandbox.install_timeout, fills the record and signals m->changed; callers
 * wait on that condition for at most wait_ms. sbx_manager_free waits until
 * m->installs_running is 0.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sandbox-internal.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/metrics.h"
#include "sbx/utf8.h"

#define SPEC_MAX 200
/* With sandbox.allow_direct_urls: room for a URL. */
#define DIRECT_SPEC_MAX 2048
#define PIP_OUTPUT_CAP (4 * 1024 * 1024)
#define VERSION_TIMEOUT_MS 30000

/* The version of an installed distribution; the name comes in argv. */
static const char version_py[] = "import sys\n"
				 "from importlib import metadata\n"
				 "try:\n"
				 "    print(metadata.version(sys.argv[1]))\n"
				 "except metadata.PackageNotFoundError:\n"
				 "    sys.exit(3)\n";

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* PEP 508 name: letters and digits, with . _ - only between them. Returns
 * its length, 0 when there is none. */
static size_t name_len(const char *p)
{
	size_t n = 0;

	if (!is_alnum(p[0]))
		return 0;
	while (is_alnum(p[n]) || p[n] == '.' || p[n] == '_' || p[n] == '-')
		n++;
	while (n > 0 && !is_alnum(p[n - 1]))
		n--;
	return n;
}

static bool version_char(char c)
{
	return is_alnum(c) || c == '.' || c == '*' || c == '+' || c == '!' || c == '-' || c == '_';
}

static const char *skip_spaces(const char *p)
{
	while (*p == ' ')
		p++;
	return p;
}

/* What pip takes for a local archive file rather than a name on the index
 * (pip's is_archive_file), whether or not such a file exists. */
static bool looks_like_archive(const char *name, size_t n)
{
	static const char *const exts[] = {".whl", ".zip",     ".tar.gz", ".tgz",
					   ".tar", ".tar.bz2", ".tbz",	  ".tar.xz",
					   ".txz", ".tlz",     ".tar.lz", ".tar.lzma"};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(exts); i++) {
		size_t k = strlen(exts[i]);
		if (n >= k && strncasecmp(name + n - k, exts[i], k) == 0)
			return true;
	}
	return false;
}

bool sbx_package_spec_valid(const char *spec, bool allow_direct, char *why, size_t why_size)
{
	static const char *const ops[] = {"===", "==", ">=", "<=", "~=", "!=", "<", ">"};
	size_t max = allow_direct ? DIRECT_SPEC_MAX : SPEC_MAX;
	const char *p;
	size_t n;

	if (!spec || !*spec)
		return sbx_why_set(why, why_size, false, "the package spec is empty");
	if (strlen(spec) > max)
		return sbx_why_set(why, why_size, false,
				   "the package spec is longer than %zu characters", max);
	if (spec[0] == '-')
		return sbx_why_set(why, why_size, false,
				   "\"%.40s\" looks like a pip option; give a package name such as "
				   "numpy or numpy==1.26",
				   spec);
	for (p = spec; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if (c < 0x20 || c >= 0x7f)
			return sbx_why_set(
			    why, why_size, false,
			    "the package spec may only hold printable ASCII, no newlines "
			    "or tabs");
		if (allow_direct)
			continue; /* the operator allows URLs and paths: pip decides */
		if (!is_alnum(*p) && !strchr(" ._-[],=<>!~*+", *p))
			return sbx_why_set(
			    why, why_size, false,
			    "the package spec may not contain '%s': give a name with "
			    "optional [extras] and version specifiers, no URL, path, "
			    "option or environment marker",
			    (char[]){*p, 0});
	}
	if (allow_direct)
		return true;
	p = skip_spaces(spec);
	n = name_len(p);
	if (n == 0)
		return sbx_why_set(why, why_size, false,
				   "\"%.40s\" does not start with a package name (letters, digits, "
				   "and . _ - between them)",
				   spec);
	if (looks_like_archive(p, n))
		return sbx_why_set(
		    why, why_size, false,
		    "\"%.*s\" is a file name, which pip would install from a local "
		    "file: give the name of a package on the index (files, paths and "
		    "URLs need sandbox.allow_direct_urls)",
		    (int)(n < 60 ? n : 60), p);
	p = skip_spaces(p + n);
	if (*p == '[') {
		p = skip_spaces(p + 1);
		for (;;) {
			n = name_len(p);
			if (n == 0)
				return sbx_why_set(why, why_size, false, "bad extras in \"%.40s\"",
						   spec);
			p = skip_spaces(p + n);
			if (*p == ']')
				break;
			if (*p != ',')
				return sbx_why_set(why, why_size, false, "bad extras in \"%.40s\"",
						   spec);
			p = skip_spaces(p + 1);
		}
		p = skip_spaces(p + 1);
	}
	/* Version specifiers: OP VERSION, separated by commas. */
	if (*p) {
		for (;;) {
			size_t k, op = 0;
			for (k = 0; k < SBX_ARRAY_SIZE(ops); k++)
				if (strncmp(p, ops[k], strlen(ops[k])) == 0) {
					op = strlen(ops[k]);
					break;
				}
			if (!op)
				return sbx_why_set(
				    why, why_size, false,
				    "\"%.40s\": after the name only [extras] and version "
				    "specifiers (==, >=, <=, ~=, !=, <, >, ===) may follow",
				    spec);
			p = skip_spaces(p + op);
			for (n = 0; version_char(p[n]); n++)
				;
			if (n == 0)
				return sbx_why_set(why, why_size, false,
						   "a version is missing in \"%.40s\"", spec);
			p = skip_spaces(p + n);
			if (!*p)
				break;
			if (*p != ',')
				return sbx_why_set(
				    why, why_size, false,
				    "\"%.40s\": separate version specifiers with commas", spec);
			p = skip_spaces(p + 1);
		}
	}
	return true;
}

/* The distribution name of a valid spec, for importlib.metadata. */
static char *spec_name(const char *spec)
{
	const char *p = skip_spaces(spec);
	return strndup(p, name_len(p));
}

void sbx_install_status_release(struct sbx_install_status *st)
{
	if (!st)
		return;
	free(st->package);
	free(st->version);
	free(st->log_tail);
	memset(st, 0, sizeof(*st));
}

char **sbx_sandbox_packages(sbx_manager *m, sbx_sandbox *sb)
{
	char **v;
	size_t n = 0, i = 0;

	pthread_mutex_lock(&m->lock);
	for (struct sbx_install *in = sb->installs; in; in = in->next)
		n += in->state == SBX_INSTALL_SUCCESS;
	v = calloc(n + 1, sizeof(*v));
	/* The list is newest first; report oldest first. */
	for (size_t want = n; v && want > 0; want--) {
		size_t k = 0;
		for (struct sbx_install *in = sb->installs; in; in = in->next)
			if (in->state == SBX_INSTALL_SUCCESS && ++k == want) {
				v[i] = strdup(in->spec);
				if (!v[i]) {
					while (i > 0)
						free(v[--i]);
					free(v);
					v = NULL;
				}
				i++;
				break;
			}
	}
	pthread_mutex_unlock(&m->lock);
	return v;
}

/* Asks the sandbox for the installed version of NAME: 1 and *ret_version
 * when installed, 0 when not, negative on failure. */
static int query_version(sbx_manager *m, sbx_sandbox *sb, const char *name, char **ret_version,
			 struct sbx_error *err)
{
	const char *const argv[] = {"python3", "-c", version_py, name, NULL};
	struct sbx_exec_spec spec = {.argv = argv,
				     .workdir = SBX_RESULTS_DIR,
				     .timeout_ms = VERSION_TIMEOUT_MS,
				     .output_cap = 64 * 1024};
	struct sbx_exec_result res = {0};
	int r;

	r = sbx_exec(m->engine, sb->container, &spec, &res, err);
	if (r < 0)
		return sbx_sandbox_exec_failed(m, sb, r, err);
	if (res.exit_code == 3) {
		r = 0;
	} else if (res.exit_code != 0 || !res.out.data) {
		r = sbx_error_set(err, -EIO, "could not ask the sandbox for %s: exit %d: %.300s",
				  name, res.exit_code, res.err.data ? res.err.data : "");
	} else {
		char *v = res.out.data;
		v[strcspn(v, "\r\n")] = '\0';
		*ret_version = strdup(v);
		r = *ret_version ? 1 : sbx_error_set(err, -ENOMEM, "out of memory");
	}
	sbx_exec_result_release(&res);
	return r;
}

/* The last SBX_INSTALL_LOG_TAIL bytes of pip's stdout then stderr, UTF-8. */
static char *log_tail(const struct sbx_exec_result *res, const char *note)
{
	struct sbx_buf all = SBX_BUF_INIT, tail = SBX_BUF_INIT;
	size_t from;

	if ((res->out.len && sbx_buf_append(&all, res->out.data, res->out.len) < 0) ||
	    (res->err.len && sbx_buf_append(&all, res->err.data, res->err.len) < 0) ||
	    (note && sbx_buf_append(&all, note, strlen(note)) < 0))
		goto fail;
	from = all.len > SBX_INSTALL_LOG_TAIL ? all.len - SBX_INSTALL_LOG_TAIL : 0;
	/* Start on a character boundary. */
	while (from > 0 && from < all.len && ((unsigned char)all.data[from] & 0xC0) == 0x80)
		from++;
	if (sbx_buf_append(&tail, all.data ? all.data + from : "", all.len - from) < 0 ||
	    sbx_utf8_sanitize(&tail) < 0)
		goto fail;
	sbx_buf_release(&all);
	return sbx_buf_steal(&tail);
fail:
	sbx_buf_release(&all);
	sbx_buf_release(&tail);
	return NULL;
}

struct job {
	sbx_manager *m;
	sbx_sandbox *sb; /* a reference */
	struct sbx_install *in;
	char *spec;
};

static void *install_thread(void *arg)
{
	struct job *job = arg;
	sbx_manager *m = job->m;
	const struct sbx_settings *s = m->s;
	const char *argv[12];
	size_t k = 0;
	struct sbx_exec_result res = {0};
	struct sbx_error err = SBX_ERROR_INIT;
	char *version = NULL, *tail = NULL, note[SBX_ERROR_MSG_MAX + 64] = "";
	enum sbx_install_state state = SBX_INSTALL_FAILED;
	const char *outcome = "failed"; /* for the metrics */
	int r;

	char **env = NULL;

	argv[k++] = "pip";
	argv[k++] = "install";
	argv[k++] = "--no-input";
	argv[k++] = "--disable-pip-version-check";
	argv[k++] = "--";
	argv[k++] = job->spec;
	argv[k] = NULL;
	struct sbx_exec_spec spec = {.argv = argv,
				     .workdir = SBX_RESULTS_DIR,
				     .timeout_ms = (long)s->sandbox.install_timeout_ms,
				     .output_cap = PIP_OUTPUT_CAP};

	/* pip reaches the index (and its file host) only through the sandbox's
	 * relay: the server fetches for it and adds the index's credentials. */
	r = sbx_sandbox_egress_pip_env(m, job->sb, &env, &err);
	if (r >= 0) {
		spec.env = (const char *const *)env;
		r = sbx_exec(m->engine, job->sb->container, &spec, &res, &err);
		if (r < 0)
			sbx_sandbox_exec_failed(m, job->sb, r, &err);
	}
	sbx_strv_free(env);
	if (r < 0) {
		outcome = "error";
		snprintf(note, sizeof(note), "\n[pip could not run: %s]\n", err.msg);
	} else if (res.timed_out) {
		outcome = "timeout";
		snprintf(note, sizeof(note),
			 "\n[pip was stopped after %lld s, the install time limit]\n",
			 (long long)(s->sandbox.install_timeout_ms / 1000));
	} else if (res.exit_code == 137 && sbx_sandbox_oom_since(m, job->sb) > 0) {
		char limit[96];
		outcome = "out_of_memory";
		sbx_memory_limit_text(m, job->sb, limit, sizeof(limit));
		snprintf(note, sizeof(note),
			 "\n[pip ran out of memory: the kernel killed it at the sandbox's memory "
			 "limit of %s]\n",
			 limit);
	} else if (res.exit_code != 0 && s->sandbox.disk > 0 &&
		   (sbx_says_out_of_disk(&res.out) || sbx_says_out_of_disk(&res.err))) {
		outcome = "out_of_disk";
		snprintf(note, sizeof(note),
			 "\n[pip ran out of disk space: a sandbox may write %lld MiB in all "
			 "(sandbox.disk); delete files or create a new sandbox]\n",
			 (long long)(s->sandbox.disk >> 20));
	} else if (res.exit_code != 0) {
		snprintf(note, sizeof(note), "\n[pip exited with %d]\n", res.exit_code);
	} else {
		_cleanup_free_ char *name = spec_name(job->spec);
		state = SBX_INSTALL_SUCCESS;
		outcome = "ok";
		if (name)
			query_version(m, job->sb, name, &version, NULL);
	}
	tail = log_tail(&res, note[0] ? note : NULL);
	sbx_exec_result_release(&res);
	sbx_metrics_install(outcome);

	sbx_sandbox_touch(job->sb);
	pthread_mutex_lock(&m->lock);
	job->in->state = state;
	job->in->version = version;
	job->in->log_tail = tail;
	job->in->seconds = sbx_seconds_since(&job->in->started);
	pthread_mutex_unlock(&m->lock);

	/* Drop the reference before telling sbx_manager_free we are done. */
	sbx_sandbox_unref(job->sb);
	free(job->spec);
	free(job);
	pthread_mutex_lock(&m->lock);
	m->installs_running--;
	pthread_cond_broadcast(&m->changed);
	sbx_reaper_wake_locked(m); /* the sandbox may be idle now */
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* Under m->lock. */
static struct sbx_install *find_install_locked(sbx_sandbox *sb, const char *spec)
{
	for (struct sbx_install *in = sb->installs; in; in = in->next)
		if (strcmp(in->spec, spec) == 0)
			return in;
	return NULL;
}

/* Under m->lock. Copies the record into st. */
static int status_of_locked(const struct sbx_install *in, struct sbx_install_status *st)
{
	memset(st, 0, sizeof(*st));
	st->state = in->state;
	st->package = strdup(in->spec);
	st->version = in->version ? strdup(in->version) : NULL;
	st->log_tail = strdup(in->log_tail ? in->log_tail : "");
	st->seconds =
	    in->state == SBX_INSTALL_RUNNING ? sbx_seconds_since(&in->started) : in->seconds;
	if (!st->package || !st->log_tail || (in->version && !st->version)) {
		sbx_install_status_release(st);
		return -ENOMEM;
	}
	return 0;
}

/* Under m->lock. Unlinks and frees the oldest finished record when the
 * list is full; false when every record is running. */
static bool make_room_locked(sbx_sandbox *sb)
{
	struct sbx_install **pp, **victim = NULL;
	size_t n = 0;

	for (pp = &sb->installs; *pp; pp = &(*pp)->next) {
		n++;
		if ((*pp)->state != SBX_INSTALL_RUNNING)
			victim = pp;
	}
	if (n < SBX_INSTALLS_MAX)
		return true;
	if (!victim)
		return false;
	struct sbx_install *v = *victim;
	*victim = v->next;
	v->next = NULL;
	sbx_install_list_free(v);
	return true;
}

/* Under m->lock: the installs OWNER runs now in its live sandboxes (not in
 * one being deleted, whose pip ends with its container). */
static size_t owner_installs_locked(sbx_manager *m, const char *owner)
{
	size_t n = 0;

	for (size_t i = 0; i < m->n; i++) {
		const sbx_sandbox *sb = m->table[i];
		if (sb->end != SBX_END_NONE || strcmp(sb->owner, owner) != 0)
			continue;
		for (const struct sbx_install *in = sb->installs; in; in = in->next)
			n += in->state == SBX_INSTALL_RUNNING;
	}
	return n;
}

/* Under m->lock: 0 when SB's owner may start one more install under Q
 * (NULL: no quota), else -EDQUOT saying so. */
static int installs_quota_locked(sbx_manager *m, sbx_sandbox *sb, const struct sbx_tenant_quota *q,
				 struct sbx_error *err)
{
	size_t mine;

	if (!q || q->installs < 0)
		return 0;
	if (q->installs == 0)
		return sbx_error_set(err, -EDQUOT,
				     "tenant \"%s\" may not install packages (%s is 0): ask the "
				     "server's administrator to allow installs",
				     sb->owner,
				     q->installs_from_key ? "the installs limit of its API key"
							  : "its installs quota");
	mine = owner_installs_locked(m, sb->owner);
	if (mine < (uint64_t)q->installs)
		return 0;
	return sbx_error_set(
	    err, -EDQUOT,
	    "tenant \"%s\" may run at most %" PRId64 " package install%s at once (%s) and runs "
	    "%zu: wait for one to end (check_package_installation_status tells when it is "
	    "success or failed; deleting its sandbox ends it too) and try again",
	    sb->owner, q->installs, q->installs == 1 ? "" : "s",
	    q->installs_from_key ? "the installs limit of its API key"
				 : "the server's quota.installs",
	    mine);
}

/* How often a wait for an install asks whether its caller cancelled. */
#define CANCEL_POLL_MS 100

/* Under m->lock: waits on m->changed until DEADLINE (CLOCK_REALTIME), or
 * CANCEL_POLL_MS at most when there is a CANCELLED hook. */
static int wait_changed_locked(sbx_manager *m, const struct timespec *deadline, bool polled)
{
	struct timespec until = *deadline, slice;

	if (polled) {
		clock_gettime(CLOCK_REALTIME, &slice);
		slice.tv_nsec += CANCEL_POLL_MS * 1000000L;
		if (slice.tv_nsec >= 1000000000L) {
			slice.tv_sec++;
			slice.tv_nsec -= 1000000000L;
		}
		if (slice.tv_sec < until.tv_sec ||
		    (slice.tv_sec == until.tv_sec && slice.tv_nsec < until.tv_nsec))
			until = slice;
	}
	return pthread_cond_timedwait(&m->changed, &m->lock, &until);
}

static int install(sbx_manager *m, sbx_sandbox *sb, const char *spec,
		   const struct sbx_install_opts *o, struct sbx_install_status *ret_status,
		   struct sbx_error *err)
{
	long wait_ms = o->wait_ms;
	char why[256];
	struct sbx_install *in = NULL, *fresh = NULL, **pp;
	struct sbx_install_status st;
	struct timespec deadline;
	struct job *job = NULL;
	pthread_attr_t attr;
	pthread_t tid;
	size_t running = 0;
	int r = 0;

	if (!sbx_package_spec_valid(spec, m->s->sandbox.allow_direct_urls, why, sizeof(why)))
		return sbx_error_set(err, -EINVAL, "%s", why);
	clock_gettime(CLOCK_REALTIME, &deadline);
	if (wait_ms > 0) {
		deadline.tv_sec += wait_ms / 1000;
		deadline.tv_nsec += (wait_ms % 1000) * 1000000L;
		if (deadline.tv_nsec >= 1000000000L) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&m->lock);
	if (sb->removed) {
		r = sbx_error_set(err, -ENOENT, "sandbox %s was deleted", sb->id);
		goto unlock;
	}
	in = find_install_locked(sb, spec);
	if (in && in->state == SBX_INSTALL_RUNNING)
		goto wait;
	for (struct sbx_install *i = sb->installs; i; i = i->next)
		running += i->state == SBX_INSTALL_RUNNING;
	if (running >= SBX_INSTALLS_RUNNING_MAX) {
		r = sbx_error_set(err, -EBUSY,
				  "%zu installs are already running in sandbox %s; wait for one "
				  "to end (get_package_install_status) and try again",
				  running, sb->id);
		goto unlock;
	}
	r = installs_quota_locked(m, sb, o->quota, err);
	if (r < 0)
		goto unlock;
	if (in) { /* ended before: forget it and install again */
		for (pp = &sb->installs; *pp != in; pp = &(*pp)->next)
			;
		*pp = in->next;
		in->next = NULL;
		sbx_install_list_free(in);
	}
	if (!make_room_locked(sb)) {
		r = sbx_error_set(err, -EBUSY, "too many installs in sandbox %s", sb->id);
		goto unlock;
	}
	in = fresh = calloc(1, sizeof(*in));
	job = calloc(1, sizeof(*job));
	if (!in || !job || !(in->spec = strdup(spec)) || !(job->spec = strdup(spec))) {
		r = sbx_error_set(err, -ENOMEM, "out of memory");
		goto unlock;
	}
	in->state = SBX_INSTALL_RUNNING;
	clock_gettime(CLOCK_MONOTONIC, &in->started);
	job->m = m;
	job->sb = sbx_sandbox_ref(sb);
	job->in = in;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&tid, &attr, install_thread, job);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		sbx_sandbox_unref(job->sb);
		r = sbx_error_set(err, -r, "cannot start the install: %s", strerror(r));
		goto unlock;
	}
	m->installs_running++;
	in->next = sb->installs;
	sb->installs = in;
	fresh = NULL;
	job = NULL;
wait:
	while (in->state == SBX_INSTALL_RUNNING && wait_ms > 0) {
		struct timespec now;
		bool stop;

		wait_changed_locked(m, &deadline, o->cancelled != NULL);
		/* The record may have gone while the lock was free (ended,
		 * then replaced by a new install of the same spec). */
		in = find_install_locked(sb, spec);
		if (!in) {
			r = sbx_error_set(err, -ENOENT,
					  "the install of %.200s was replaced meanwhile: "
					  "check_package_installation_status tells its state",
					  spec);
			goto unlock;
		}
		clock_gettime(CLOCK_REALTIME, &now);
		if (now.tv_sec > deadline.tv_sec ||
		    (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec))
			break;
		if (!o->cancelled || in->state != SBX_INSTALL_RUNNING)
			continue;
		pthread_mutex_unlock(&m->lock);
		stop = o->cancelled(o->userdata);
		pthread_mutex_lock(&m->lock);
		if (stop) {
			/* The install goes on in the background; nobody waits. */
			r = sbx_error_set(err, -ECANCELED,
					  "cancelled while waiting for the install");
			goto unlock;
		}
		in = find_install_locked(sb, spec);
		if (!in)
			break; /* status_of_locked below is not reached with NULL */
	}
	if (!in) {
		r = sbx_error_set(err, -ENOENT,
				  "the install of %.200s was replaced meanwhile: "
				  "check_package_installation_status tells its state",
				  spec);
		goto unlock;
	}
	r = status_of_locked(in, &st);
	if (r < 0)
		r = sbx_error_set(err, r, "out of memory");
	in = NULL;
unlock:
	pthread_mutex_unlock(&m->lock);
	if (job)
		free(job->spec);
	free(job);
	sbx_install_list_free(fresh);
	if (r < 0)
		return r;
	*ret_status = st;
	return 0;
}

static int install_status(sbx_manager *m, sbx_sandbox *sb, const char *spec,
			  struct sbx_install_status *ret_status, struct sbx_error *err)
{
	char why[256];
	struct sbx_install_status st = {0};
	_cleanup_free_ char *name = NULL;
	char *version = NULL;
	struct sbx_install *in;
	int r;

	if (!sbx_package_spec_valid(spec, m->s->sandbox.allow_direct_urls, why, sizeof(why)))
		return sbx_error_set(err, -EINVAL, "%s", why);
	pthread_mutex_lock(&m->lock);
	in = find_install_locked(sb, spec);
	r = in ? status_of_locked(in, &st) : 1;
	pthread_mutex_unlock(&m->lock);
	if (r < 0)
		return sbx_error_set(err, r, "out of memory");
	if (r == 0) {
		*ret_status = st;
		return 0;
	}

	name = spec_name(spec);
	if (!name || !(st.package = strdup(spec)))
		return sbx_error_set(err, -ENOMEM, "out of memory");
	r = query_version(m, sb, name, &version, err);
	if (r < 0) {
		sbx_install_status_release(&st);
		return r;
	}
	st.state = r > 0 ? SBX_INSTALL_PRESENT : SBX_INSTALL_NONE;
	st.version = version;
	*ret_status = st;
	return 0;
}

int sbx_sandbox_install(sbx_manager *m, sbx_sandbox *sb, const char *spec, long wait_ms,
			struct sbx_install_status *ret_status, struct sbx_error *err)
{
	const struct sbx_install_opts o = {.wait_ms = wait_ms};

	return sbx_sandbox_install_ex(m, sb, spec, &o, ret_status, err);
}

/* Between sbx_sandbox_begin and end: the install with OPTS, or, when OPTS
 * is NULL, the status of SPEC. */
static int in_sandbox(sbx_manager *m, sbx_sandbox *sb, const char *spec,
		      const struct sbx_install_opts *opts, struct sbx_install_status *ret_status,
		      struct sbx_error *err)
{
	struct sbx_install_status st = {0};
	int r = sbx_sandbox_begin(sb, err), q;

	if (r < 0)
		return r;
	r = opts ? install(m, sb, spec, opts, &st, err) : install_status(m, sb, spec, &st, err);
	q = sbx_sandbox_end(sb, r < 0 ? NULL : err);
	if (r >= 0 && q < 0) {
		sbx_install_status_release(&st);
		return q;
	}
	if (r >= 0)
		*ret_status = st;
	return r;
}

int sbx_sandbox_install_ex(sbx_manager *m, sbx_sandbox *sb, const char *spec,
			   const struct sbx_install_opts *opts,
			   struct sbx_install_status *ret_status, struct sbx_error *err)
{
	static const struct sbx_install_opts none = {0};

	return in_sandbox(m, sb, spec, opts ? opts : &none, ret_status, err);
}

int sbx_sandbox_install_status(sbx_manager *m, sbx_sandbox *sb, const char *spec,
			       struct sbx_install_status *ret_status, struct sbx_error *err)
{
	return in_sandbox(m, sb, spec, NULL, ret_status, err);
}
