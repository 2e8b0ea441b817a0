/* SPDX-License-Identifier: MIT */
/*
 * A call in a sandbox: sbx_sandbox_begin and sbx_sandbox_end around it,
 * the record's last use (sbx_sandbox_touch), and why no call may start in
 * it: the sandbox is being removed or is gone (deleted, expired), or its
 * container stopped without the server's doing (how it died, and the
 * words for it). Ending a call wakes the reaper. Below every file that
 * works in a container (exec.c, interp.c, files.c, packages.c, src/egress).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandbox-internal.h"
#include "sbx/clock.h"
#include "sbx/common.h"
#include "sbx/log.h"
#include "sbx/metrics.h"

/* Under m->lock. */
void sbx_sandbox_touch_locked(sbx_sandbox *sb)
{
	sb->last_used = time(NULL);
	sb->used_ms = sbx_monotonic_ms();
}

void sbx_sandbox_touch(sbx_sandbox *sb)
{
	pthread_mutex_lock(&sb->m->lock);
	sbx_sandbox_touch_locked(sb);
	pthread_mutex_unlock(&sb->m->lock);
}

void sbx_iso_time(time_t t, char *buf, size_t size)
{
	struct tm tm;

	if (!gmtime_r(&t, &tm) || strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, size, "?");
}

/* A duration for people: "30 min", "24 h", "2 s", "1500 ms". */
static void human_ms(int64_t ms, char *buf, size_t size)
{
	if (ms > 0 && ms % (3600 * 1000) == 0)
		snprintf(buf, size, "%lld h", (long long)(ms / (3600 * 1000)));
	else if (ms > 0 && ms % (60 * 1000) == 0)
		snprintf(buf, size, "%lld min", (long long)(ms / (60 * 1000)));
	else if (ms % 1000 == 0)
		snprintf(buf, size, "%lld s", (long long)(ms / 1000));
	else
		snprintf(buf, size, "%lld ms", (long long)ms);
}

/* The message for sandbox WHAT (its id or name as the caller gave it),
 * which was removed at WHEN (or is being removed) for END; DURING: while
 * the caller's call ran. Returns -ENOENT. */
int sbx_gone_error(sbx_manager *m, struct sbx_error *err, const char *what, enum sbx_end end,
		   time_t when, bool during)
{
	char at[32], span[32];

	sbx_iso_time(when, at, sizeof(at));
	switch (end) {
	case SBX_END_IDLE:
		human_ms(m->s->sandbox.idle_timeout_ms, span, sizeof(span));
		return sbx_error_set(err, -ENOENT,
				     "sandbox \"%.80s\" expired: it was not used for %s "
				     "(sandbox.idle_timeout), so the server removed it at %s with "
				     "its files and packages; create_sandbox makes a new one",
				     what, span, at);
	case SBX_END_SLEPT:
		human_ms(m->s->sandbox.sleep_lifetime_ms, span, sizeof(span));
		return sbx_error_set(
		    err, -ENOENT,
		    "sandbox \"%.80s\" expired: it was asleep (unused) for %s "
		    "(sandbox.sleep_lifetime), so the server removed it at %s with "
		    "its files and packages; create_sandbox makes a new one",
		    what, span, at);
	case SBX_END_LIFETIME:
		human_ms(m->s->sandbox.max_lifetime_ms, span, sizeof(span));
		return sbx_error_set(
		    err, -ENOENT,
		    "sandbox \"%.80s\" expired: it reached the server's maximum "
		    "age of %s (sandbox.max_lifetime), so the server removed it at "
		    "%s with its files and packages; create_sandbox makes a new one",
		    what, span, at);
	case SBX_END_DELETED:
	case SBX_END_NONE:
		break;
	}
	return sbx_error_set(err, -ENOENT,
			     "sandbox \"%.80s\" was deleted (delete_sandbox) at %s%s, with its "
			     "files and packages; create_sandbox makes a new one",
			     what, at, during ? ", while this call ran" : "");
}

enum sbx_death sbx_death_of(const struct sbx_container_info *ci, int *ret_code)
{
	*ret_code = ci->exit_code;
	if (ci->running)
		return SBX_DEATH_NONE;
	if (ci->lost)
		return SBX_DEATH_LOST;
	if (ci->oom_killed)
		return SBX_DEATH_OOM;
	/* A process killed by signal N exits, as the engines report it, with
	 * 128 + N. */
	if (ci->exit_code > 128 && ci->exit_code < 128 + 65) {
		*ret_code = ci->exit_code - 128;
		return SBX_DEATH_KILLED;
	}
	return SBX_DEATH_EXITED;
}

bool sbx_sandbox_died_locked(sbx_manager *m, sbx_sandbox *sb, enum sbx_death death, int code,
			     bool blind)
{
	if (death == SBX_DEATH_NONE || sb->end != SBX_END_NONE || sb->removed)
		return false;
	/* Stopped by its sleep, or not yet started by its wake: only its
	 * container's removal is a death then. */
	if (sb->sleep != SBX_SLEEP_AWAKE && death != SBX_DEATH_REMOVED)
		return false;
	/* Known dead: only its removal is news (a forced removal kills first). */
	if (sb->death != SBX_DEATH_NONE && (death != SBX_DEATH_REMOVED || sb->death == death))
		return false;
	/* Its container gone while it slept: dead, no longer asleep (removed
	 * at its idle time, not its sleep's end). */
	if (sb->sleep == SBX_SLEEP_ASLEEP) {
		sb->sleep = SBX_SLEEP_AWAKE;
		sb->slept_at = 0;
	}
	sb->death = death;
	sb->death_code = code;
	sb->death_at = time(NULL);
	sb->death_blind = blind;
	/* A dead one goes at its idle time, which may be long past (one that
	 * slept): the reaper's next turn is not the one it planned. */
	sbx_reaper_wake_locked(m);
	return true;
}

bool sbx_sandbox_died_of_locked(sbx_manager *m, sbx_sandbox *sb,
				const struct sbx_container_info *ci, bool blind)
{
	int code;
	enum sbx_death d = sbx_death_of(ci, &code);
	/* A lost one's engine says what happened, whenever it is learnt. */
	bool news = sbx_sandbox_died_locked(m, sb, d, code, blind && d != SBX_DEATH_LOST);

	if (news && d == SBX_DEATH_LOST) {
		/* The engine's words, shown to clients: printable ASCII only. */
		size_t i = 0;
		for (; ci->lost[i] && i + 1 < sizeof(sb->death_lost); i++)
			sb->death_lost[i] =
			    ci->lost[i] >= 0x20 && ci->lost[i] < 0x7f ? ci->lost[i] : '?';
		sb->death_lost[i] = '\0';
	}
	return news;
}

void sbx_sandbox_log_death(sbx_manager *m, sbx_sandbox *sb)
{
	char why[320];

	pthread_mutex_lock(&m->lock);
	sbx_death_text(m, sb, why, sizeof(why));
	pthread_mutex_unlock(&m->lock);
	sbx_log_warn("sandbox %s (owner %s) no longer runs: %s", sb->id, sb->owner, why);
}

/* What happened to a dead sandbox, for people: "its container was ...". */
void sbx_death_text(sbx_manager *m, const sbx_sandbox *sb, char *buf, size_t size)
{
	char at[32], limit[128] = "";
	const char *blind = sb->death_blind ? " while the server was not following the engine "
					      "(the server was down, or the engine restarted)"
					    : "";

	sbx_iso_time(sb->death_at, at, sizeof(at));
	switch (sb->death) {
	case SBX_DEATH_OOM:
		if (m->s->sandbox.memory > 0) {
			char text[96];
			sbx_memory_limit_text(m, sb, text, sizeof(text));
			snprintf(limit, sizeof(limit), " (its memory limit is %s)", text);
		}
		snprintf(buf, size,
			 "its container was killed by the kernel's out-of-memory killer%s%s; "
			 "noticed at %s",
			 limit, blind, at);
		break;
	case SBX_DEATH_KILLED:
		snprintf(buf, size, "its container was killed (signal %d)%s%s; noticed at %s",
			 sb->death_code,
			 sb->death_blind ? ""
					 : " from outside the server (by hand, or by the "
					   "engine as it stopped)",
			 blind, at);
		break;
	case SBX_DEATH_EXITED:
		snprintf(buf, size, "its container stopped (exit code %d)%s; noticed at %s",
			 sb->death_code, blind, at);
		break;
	case SBX_DEATH_REMOVED:
		snprintf(buf, size,
			 "its container was removed from outside the server%s; noticed at %s",
			 blind, at);
		break;
	case SBX_DEATH_LOST:
		snprintf(buf, size, "the engine lost it: %s%s; noticed at %s", sb->death_lost,
			 blind, at);
		break;
	case SBX_DEATH_NONE:
		snprintf(buf, size, "it runs");
		break;
	}
}

/* Under m->lock: the error for a call on dead SB (-ESRCH). */
static int dead_error_locked(sbx_manager *m, const sbx_sandbox *sb, struct sbx_error *err)
{
	char why[320];

	sbx_death_text(m, sb, why, sizeof(why));
	return sbx_error_set(err, -ESRCH,
			     "sandbox %s no longer runs: %s. Its Python state%s are lost; "
			     "delete_sandbox frees its place and create_sandbox makes a new one",
			     sb->id, why,
			     sb->death == SBX_DEATH_REMOVED ? ", files and packages"
			     : sb->death == SBX_DEATH_LOST
				 ? ", running processes, files and packages"
				 : " and running processes");
}

uint64_t sbx_sandbox_run_locked(const sbx_sandbox *sb)
{
	return sb->sleep == SBX_SLEEP_AWAKE ? sb->wakes : UINT64_MAX;
}

bool sbx_sandbox_busy_locked(const sbx_sandbox *sb)
{
	if (sb->calls > 0)
		return true;
	for (const struct sbx_install *in = sb->installs; in; in = in->next)
		if (in->state == SBX_INSTALL_RUNNING)
			return true;
	return false;
}

/* The waker's part of sbx_sandbox_begin_woke (SB marked WAKING by it):
 * starts the container; SB is then awake, or asleep again on failure
 * (dead when its container is gone). Wakes the waiters. */
static int wake_marked(sbx_sandbox *sb, struct sbx_error *ret_err)
{
	sbx_manager *m = sb->m;
	struct sbx_error unmark = SBX_ERROR_INIT, e = SBX_ERROR_INIT, *err = &e;
	struct sbx_container_info ci = {0};
	int64_t t0 = sbx_metrics_now_us();
	int r = sbx_container_start(m->engine, sb->container, err), q;

	/* A 404 may name something else (a network); a failure may be a lost
	 * answer: what the container is now decides. */
	if (r < 0) {
		q = sbx_container_inspect(m->engine, sb->container, &ci, NULL);
		if (q >= 0 && ci.running) {
			sbx_error_clear(err);
			r = 0;
		} else if (r == -ENOENT && q != -ENOENT) {
			r = e.code = -EIO;
		}
		sbx_container_info_release(&ci);
	}

	/* Its name's asleep mark goes once it runs (a server that dies before
	 * then adopts it asleep; after, running, and takes the mark off). */
	if (r >= 0 && sbx_sandbox_mark_asleep(sb, 0, &unmark) < 0)
		sbx_log_warn("sandbox %s: its container's name keeps the asleep mark: %s", sb->id,
			     unmark.msg);
	pthread_mutex_lock(&m->lock);
	if (r >= 0) {
		sb->sleep = SBX_SLEEP_AWAKE;
		sb->slept_at = 0;
		sb->wakes++;
		/* A new run of its container: its cgroup counts from 0 again. */
		sb->cpu_seen_ns = 0;
		sb->oom_kills = 0;
		sb->sampled_ms = sbx_monotonic_ms();
	} else if (r == -ENOENT) {
		/* Removed behind the server's back: dead, said so. */
		sb->sleep = SBX_SLEEP_AWAKE;
		sbx_sandbox_died_locked(m, sb, SBX_DEATH_REMOVED, -1, false);
	} else {
		sb->sleep = SBX_SLEEP_ASLEEP;
	}
	if (r < 0)
		sbx_error_prefix(err, "waking sandbox %s", sb->id);
	sb->wake_tries++;
	sb->wake_error = e;
	if (r >= 0)
		sbx_error_clear(&sb->wake_error);
	pthread_cond_broadcast(&m->woke);
	pthread_mutex_unlock(&m->lock);
	sbx_metrics_wake(r >= 0 ? "ok" : "error", sbx_metrics_now_us() - t0);
	if (r < 0 && ret_err)
		*ret_err = e;
	return r;
}

int sbx_sandbox_begin_woke(sbx_sandbox *sb, bool *ret_woke, struct sbx_error *err)
{
	sbx_manager *m = sb->m;
	bool waker = false, slept, removed;
	enum sbx_end end;
	uint64_t tries;
	time_t at;
	int r;

	if (ret_woke)
		*ret_woke = false;
	pthread_mutex_lock(&m->lock);
	slept = sb->sleep != SBX_SLEEP_AWAKE;
	tries = sb->wake_tries;
	/* Being put to sleep or woken by another: wait for it to end. */
	while (sb->end == SBX_END_NONE && !sb->removed && sb->death == SBX_DEATH_NONE &&
	       (sb->sleep == SBX_SLEEP_GOING || sb->sleep == SBX_SLEEP_WAKING))
		pthread_cond_wait(&m->woke, &m->lock);
	end = sb->end;
	at = sb->end_at;
	removed = sb->removed;
	if (end == SBX_END_NONE && !removed && sb->death != SBX_DEATH_NONE) {
		r = dead_error_locked(m, sb, err);
		pthread_mutex_unlock(&m->lock);
		return r;
	}
	if (end == SBX_END_NONE && !removed && sb->sleep == SBX_SLEEP_ASLEEP &&
	    sb->wake_tries != tries && sb->wake_error.code < 0) {
		/* The wake this call waited for failed: its error, not a try
		 * more (the next call tries again). */
		r = sb->wake_error.code;
		if (err)
			*err = sb->wake_error;
		pthread_mutex_unlock(&m->lock);
		return r;
	}
	if (end == SBX_END_NONE && !removed) {
		sb->calls++; /* counted first: nothing puts it to sleep again meanwhile */
		sbx_sandbox_touch_locked(sb);
		if (sb->sleep == SBX_SLEEP_ASLEEP) {
			sb->sleep = SBX_SLEEP_WAKING;
			waker = true;
		}
	}
	pthread_mutex_unlock(&m->lock);
	if (end != SBX_END_NONE)
		return sbx_gone_error(m, err, sb->id, end, at, false);
	if (removed)
		return sbx_error_set(
		    err, -ENOENT, "sandbox %s was removed; create_sandbox makes a new one", sb->id);
	if (waker) {
		r = wake_marked(sb, err);
		if (r < 0) {
			sbx_sandbox_end(sb, NULL);
			return r;
		}
	}
	if (ret_woke)
		*ret_woke = slept || waker;
	return 0;
}

int sbx_sandbox_wake(sbx_manager *m, sbx_sandbox *sb, bool *ret_woke, struct sbx_error *err)
{
	int r;

	(void)m;
	r = sbx_sandbox_begin_woke(sb, ret_woke, err);
	if (r < 0)
		return r;
	return sbx_sandbox_end(sb, err);
}

int sbx_sandbox_begin(sbx_sandbox *sb, struct sbx_error *err)
{
	return sbx_sandbox_begin_woke(sb, NULL, err);
}

bool sbx_sandbox_ending(sbx_sandbox *sb)
{
	bool ending;

	pthread_mutex_lock(&sb->m->lock);
	ending = sb->end != SBX_END_NONE || sb->removed;
	pthread_mutex_unlock(&sb->m->lock);
	return ending;
}

int sbx_sandbox_end(sbx_sandbox *sb, struct sbx_error *err)
{
	sbx_manager *m = sb->m;
	enum sbx_end end;
	time_t at;

	pthread_mutex_lock(&m->lock);
	sb->calls--;
	sbx_sandbox_touch_locked(sb);
	if (sb->calls == 0)
		sbx_reaper_wake_locked(m); /* it may be past its max_lifetime */
	end = sb->end;
	at = sb->end_at;
	pthread_mutex_unlock(&m->lock);
	if (end != SBX_END_NONE)
		return sbx_gone_error(m, err, sb->id, end, at, true);
	return 0;
}

int sbx_sandbox_exec_failed(sbx_manager *m, sbx_sandbox *sb, int r, struct sbx_error *err)
{
	struct sbx_container_info ci = {0};
	bool news = false;
	enum sbx_end end;
	uint64_t run;
	time_t at;
	int q;

	pthread_mutex_lock(&m->lock);
	end = sb->end;
	at = sb->end_at;
	run = sbx_sandbox_run_locked(sb);
	pthread_mutex_unlock(&m->lock);
	if (end != SBX_END_NONE)
		return sbx_gone_error(m, err, sb->id, end, at, true);
	q = sbx_container_inspect(m->engine, sb->container, &ci, NULL);
	pthread_mutex_lock(&m->lock);
	if (q == -ENOENT) {
		news = sbx_sandbox_died_locked(m, sb, SBX_DEATH_REMOVED, -1, false);
	} else if (q >= 0 && !ci.running && sbx_sandbox_run_locked(sb) == run) {
		news = sbx_sandbox_died_of_locked(m, sb, &ci, false);
	}
	if (sb->death != SBX_DEATH_NONE && sb->end == SBX_END_NONE)
		r = dead_error_locked(m, sb, err);
	else
		sbx_error_prefix(err, "sandbox %s", sb->id);
	pthread_mutex_unlock(&m->lock);
	sbx_container_info_release(&ci);
	if (news)
		sbx_sandbox_log_death(m, sb);
	return r;
}

void sbx_reaper_wake_locked(sbx_manager *m)
{
	if (m->reaper)
		sbx_worker_wake_locked(&m->reaper->worker);
}
