/* SPDX-License-Identifier: MIT */
/*
 * sandbox.disk: what one sandbox may write, on a disk engine of
 * tools/provision-engines (containers on btrfs with quotas), and the refusal
 * on an engine whose storage cannot bound a disk (the shared engines:
 * overlay on extfs).
 *
 *   tests/test-disk TYPE DISK_URL IMAGE PLAIN_URL
 *
 * Every writable place of a sandbox (/tmp, /app/results, the venv pip
 * installs into, the home folder) draws on one bound; a write past it fails
 * inside (EDQUOT) and the result says the sandbox is out of disk; a
 * neighbour sandbox writes on; space freed can be written again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox-fixture.h"
#include "sbx/common.h"
#include "tap.h"

#define DISK_MIB 192

/* A shell command that writes MIB MiB of zeros to PATH; its status is dd's. */
static void fill_cmd(char *buf, size_t n, const char *path, int mib)
{
	snprintf(buf, n, "dd if=/dev/zero of=%s bs=1M count=%d 2>&1; echo \"rc=$?\"", path, mib);
}

/* Writing more than the bound to PATH fails with the quota's error, and the
 * result says the sandbox is out of disk, naming the setting. */
static void check_full(sbx_manager *m, sbx_sandbox *sb, const char *path)
{
	struct sbx_run_result res = {0};
	char cmd[256];

	fill_cmd(cmd, sizeof(cmd), path, DISK_MIB + 64);
	if (shell(m, sb, cmd, &res) == 0) {
		tap_ok(res.out.data && !strstr(res.out.data, "rc=0") &&
			   (strstr(res.out.data, "Disk quota exceeded") ||
			    strstr(res.out.data, "No space left on device")),
		       "%s: a write past %d MiB fails inside (%.120s)", path, DISK_MIB,
		       res.out.data ? res.out.data : "");
		tap_ok(res.out_of_disk, "%s: the result says the sandbox is out of disk", path);
		tap_ok(res.notice && strstr(res.notice, "sandbox.disk") &&
			   strstr(res.notice, "192 MiB"),
		       "%s: the notice names the bound and the setting (%s)", path,
		       res.notice ? res.notice : "none");
	}
	sbx_run_result_release(&res);
	snprintf(cmd, sizeof(cmd), "rm -f %s && sync", path);
	if (shell(m, sb, cmd, &res) == 0)
		tap_is_int(res.exit_code, 0, "%s: removed", path);
	sbx_run_result_release(&res);
}

/* Writes of MIB MiB to PATH succeed. */
static void check_writes(sbx_manager *m, sbx_sandbox *sb, const char *path, int mib,
			 const char *what)
{
	struct sbx_run_result res = {0};
	char cmd[256];

	fill_cmd(cmd, sizeof(cmd), path, mib);
	if (shell(m, sb, cmd, &res) == 0)
		tap_ok(res.out.data && strstr(res.out.data, "rc=0") && !res.out_of_disk,
		       "%s: %d MiB to %s (%.100s)", what, mib, path,
		       res.out.data ? res.out.data : "");
	sbx_run_result_release(&res);
}

static void test_bound(void)
{
	const char *const extra[] = {"sandbox.pool_size=0", "sandbox.disk=192m", NULL};
	struct test_manager x;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res = {0};
	sbx_sandbox *a = NULL, *b = NULL;

	test_manager_open(&x, "d", extra, NULL);
	if (!tap_call(sbx_sandbox_create(x.m, "alice", "a", &a, &err), err.msg, "create a") ||
	    !tap_call(sbx_sandbox_create(x.m, "alice", "b", &b, &err), err.msg, "create b"))
		tap_bail("no sandbox on the disk engine");

	/* What the engine was told. libpod's inspect does not report a
	 * storage option: there the writes below are the proof. */
	if (!strcmp(engine_type, "docker")) {
		_cleanup_free_ char *cid = container_of(x.inst, sbx_sandbox_id(a));
		struct sbx_container_info ci = {0};
		if (tap_ok(cid != NULL, "a's container") &&
		    tap_call(sbx_container_inspect(engine, cid, &ci, &err), err.msg, "inspect a"))
			tap_is_int(ci.disk_bytes, (int64_t)DISK_MIB << 20,
				   "inspect: the container's size bound is sandbox.disk");
		sbx_container_info_release(&ci);
	}

	/* Each writable place is bounded... */
	check_full(x.m, a, "/tmp/fill");
	check_full(x.m, a, "/app/results/fill.bin");
	check_full(x.m, a, "/opt/venv/lib/fill.bin");
	check_full(x.m, a, "/home/sandbox/fill.bin");
	/* ...by one bound for all of them together. */
	check_writes(x.m, a, "/tmp/half", DISK_MIB / 2 + 16, "together");
	check_full(x.m, a, "/app/results/rest.bin");

	/* Python sees the same, and is told so. */
	if (python(x.m, a,
		   "try:\n"
		   "    with open('big.bin', 'wb') as f:\n"
		   "        for _ in range(192):\n"
		   "            f.write(b'\\0' * (1 << 20))\n"
		   "except OSError as e:\n"
		   "    print('refused', e.errno)\n"
		   "    raise\n",
		   &res) == 0) {
		tap_ok(res.out.data && strstr(res.out.data, "refused"),
		       "Python: a write past the bound raises OSError (%s)",
		       res.out.data ? res.out.data : "");
		tap_ok(res.out_of_disk && res.notice && strstr(res.notice, "sandbox.disk"),
		       "Python: the result says the sandbox is out of disk (%s)",
		       res.notice ? res.notice : "none");
	}
	sbx_run_result_release(&res);

	/* The neighbour never notices: b writes while a is full. */
	check_writes(x.m, b, "/app/results/neighbour.bin", DISK_MIB - 32,
		     "a neighbour while a is full");
	/* Space freed can be written again. */
	if (shell(x.m, a, "rm -f /tmp/half /app/results/big.bin && sync", &res) == 0)
		tap_is_int(res.exit_code, 0, "a frees its space");
	sbx_run_result_release(&res);
	check_writes(x.m, a, "/app/results/again.bin", DISK_MIB - 32, "after freeing");

	sbx_sandbox_unref(a);
	sbx_sandbox_unref(b);
	test_manager_close(&x, "no container of the bound's run is left");
}

/* An engine whose storage cannot bound a disk: the check says so, naming
 * the storage and the setting, and no sandbox is made. */
static void test_refused(const char *plain_url)
{
	struct sbx_engine_config cfg = {.type = engine_type, .url = plain_url};
	const char *const extra[] = {"sandbox.pool_size=0", "sandbox.disk=2g", NULL};
	struct sbx_engine_storage st = {0};
	struct test_manager x;
	struct sbx_error err = SBX_ERROR_INIT;
	sbx_engine *plain = NULL;
	sbx_sandbox *sb = NULL;
	int r;

	if (!tap_call(sbx_engine_open(&cfg, &plain, &err), err.msg, "open the plain engine"))
		return;
	if (tap_call(sbx_engine_storage(plain, &st, &err), err.msg, "its storage"))
		tap_ok(!st.size_bound && *st.driver,
		       "the plain engine's storage (%s on %s) cannot bound a disk", st.driver,
		       st.backing_fs);
	sbx_engine_storage_release(&st);
	if (tap_call(sbx_engine_storage(engine, &st, &err), err.msg, "the disk engine's storage"))
		tap_ok(st.size_bound && !strcmp(st.driver, "btrfs"),
		       "the disk engine's storage (%s) can", st.driver);
	sbx_engine_storage_release(&st);

	test_manager_open(&x, "refused", extra, plain);
	r = sbx_disk_check(&x.s, plain, &err);
	tap_ok(r == -ENOTSUP && strstr(err.msg, "sandbox.disk") && strstr(err.msg, "2048 MiB") &&
		   strstr(err.msg, "sandbox.disk = 0") && strstr(err.msg, "btrfs"),
	       "sbx_disk_check refuses it, saying what to do: %s", err.msg);
	sbx_error_clear(&err);
	r = sbx_sandbox_create(x.m, "alice", "nope", &sb, &err);
	tap_ok(r == -ENOTSUP && !sb && strstr(err.msg, "sandbox.disk"),
	       "create_sandbox is refused the same way: %s", err.msg);
	sbx_error_clear(&err);
	r = sbx_sandbox_create(x.m, "alice", "nope2", &sb, &err);
	tap_ok(r == -ENOTSUP && !sb && strstr(err.msg, "sandbox.disk"),
	       "... and again at once, from the kept failure: %s", err.msg);
	sbx_error_clear(&err);
	sleep(1);
	r = sbx_sandbox_create(x.m, "alice", "nope3", &sb, &err);
	tap_ok(r == -ENOTSUP && !sb && strstr(err.msg, "sandbox.disk"),
	       "... and a second later, asked again: %s", err.msg);
	{
		struct sbx_kv want[] = {{SBX_LABEL_INSTANCE, x.inst}};
		struct sbx_container_summary *list = NULL;
		size_t n = 0;
		if (tap_call(sbx_container_list(plain, want, 1, &list, &n, &err), err.msg,
			     "list the plain engine's containers of the run"))
			tap_is_int((long long)n, 0, "and no container was made on the engine");
		sbx_container_list_free(list, n);
	}
	sb = sbx_sandbox_unref(sb);
	x.m = sbx_manager_free(x.m);
	sbx_settings_release(&x.s);
	{
		const char *const off[] = {"sandbox.disk=0", NULL};
		struct sbx_settings s;
		settings_for(&s, x.inst, off);
		tap_call(sbx_disk_check(&s, plain, &err), err.msg,
			 "with sandbox.disk = 0 the plain engine is accepted");
		sbx_settings_release(&s);
	}
	sbx_engine_free(plain);
}

/* SANDBOX's disk_bytes and disk_byte_seconds in OWNER's list; false when
 * it is not listed. */
static bool disk_of(sbx_manager *m, const char *owner, const char *name, int64_t *ret_bytes,
		    int64_t *ret_byte_s)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_sandbox_info *list = NULL;
	size_t n = 0;
	bool found = false;

	if (sbx_manager_list(m, owner, &list, &n, &err) < 0)
		return false;
	for (size_t i = 0; i < n && !found; i++)
		if (!strcmp(list[i].name, name)) {
			*ret_bytes = (int64_t)list[i].disk_bytes;
			*ret_byte_s = (int64_t)list[i].disk_byte_seconds;
			found = true;
		}
	sbx_sandbox_info_list_free(list, n);
	return found;
}

/* Polls (every 250 ms, 60 s at most) until M's sampler says the disk of
 * alice's "m" is from LOW to HIGH bytes; its figures in *RET_*. */
static bool wait_disk(sbx_manager *m, int64_t low, int64_t high, int64_t *ret_bytes,
		      int64_t *ret_byte_s)
{
	/* 60 s: a turn of the sampler takes as long as the engine's sized
	 * inspects (Podman: seconds each, on a loaded machine), and it rests as
	 * long again after one (usage.c). */
	for (int i = 0; i < 240; i++) {
		if (disk_of(m, "alice", "m", ret_bytes, ret_byte_s) && *ret_bytes >= low &&
		    *ret_bytes <= high)
			return true;
		usleep(250 * 1000);
	}
	return false;
}

/* The usage meter on a bounded disk: what the sandbox wrote, at most
 * sandbox.disk. The engine sizes files as they seem (a sparse one whole,
 * though the quota charges none of it), so a sparse file of 1 TiB is
 * metered as the bound, and one of 5 TiB, a figure the engine layer does
 * not believe, as the bound too, counting on over time. */
static void test_meter(void)
{
	const char *const extra[] = {"sandbox.pool_size=0", "sandbox.disk=192m",
				     "sandbox.usage_interval=1s", NULL};
	const int64_t bound = (int64_t)DISK_MIB << 20;
	struct test_manager x;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_run_result res = {0};
	sbx_sandbox *sb = NULL;
	int64_t bytes = -1, byte_s = -1, before;
	bool ok;

	test_manager_open(&x, "meter", extra, NULL);
	if (!tap_call(sbx_sandbox_create(x.m, "alice", "m", &sb, &err), err.msg, "create m"))
		tap_bail("no sandbox on the disk engine");
	check_writes(x.m, sb, "/app/results/real.bin", 20, "meter");
	ok = wait_disk(x.m, 20 << 20, 64 << 20, &bytes, &byte_s);
	tap_ok(ok, "meter: 20 MiB written, disk_bytes says so (%lld)", (long long)bytes);
	if (shell(x.m, sb, "truncate -s 1T /app/results/sparse && echo done", &res) == 0)
		tap_ok(res.out.data && strstr(res.out.data, "done"),
		       "meter: a sparse file of 1 TiB");
	sbx_run_result_release(&res);
	ok = wait_disk(x.m, bound, bound, &bytes, &byte_s);
	tap_ok(ok, "meter: the engine's figure past sandbox.disk counts as sandbox.disk (%lld)",
	       (long long)bytes);
	if (shell(x.m, sb, "truncate -s 5T /app/results/sparse && echo done", &res) == 0)
		tap_ok(res.out.data && strstr(res.out.data, "done"),
		       "meter: a sparse file of 5 TiB");
	sbx_run_result_release(&res);
	sleep(2); /* the sampler sees it */
	disk_of(x.m, "alice", "m", &bytes, &before);
	/* At least a second's worth of the bound is added, however slowly the
	 * engine sizes the layer (seconds, on a loaded machine, and as long
	 * again of rest): 60 s at most. */
	for (int i = 0; i < 240; i++) {
		disk_of(x.m, "alice", "m", &bytes, &byte_s);
		if (bytes != bound || byte_s - before >= bound)
			break;
		usleep(250 * 1000);
	}
	tap_ok(bytes == bound && byte_s - before >= bound,
	       "meter: a figure not believed (past 4 TiB) counts as sandbox.disk, on and on "
	       "(%lld bytes, %lld byte-seconds more)",
	       (long long)bytes, (long long)(byte_s - before));
	sbx_sandbox_unref(sb);
	test_manager_close(&x, "no container of the meter's run is left");
}

/* A sandbox deleted before the sampler's first turn reached it (every
 * 10 minutes here) is metered all the same: its deletion asks its disk,
 * and counts it from the moment it was ready. */
static void test_meter_short_lived(void)
{
	const char *const extra[] = {"sandbox.pool_size=0", "sandbox.disk=192m",
				     "sandbox.usage_interval=10m", NULL};
	struct test_manager x;
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_tenant_usage t = {0};
	sbx_sandbox *sb = NULL;

	test_manager_open(&x, "brief", extra, NULL);
	if (!tap_call(sbx_sandbox_create(x.m, "bob", "q", &sb, &err), err.msg, "create q"))
		tap_bail("no sandbox on the disk engine");
	check_writes(x.m, sb, "/app/results/real.bin", 20, "brief");
	sleep(2);
	tap_call(sbx_sandbox_delete(x.m, "bob", "q", &err), err.msg, "brief: q deleted");
	sbx_manager_tenant_gone(x.m, "bob", &t);
	tap_ok(t.disk_byte_seconds >= (20u << 20) * 2u,
	       "brief: a sandbox deleted before its first sample leaves its disk in its "
	       "tenant's total (%llu byte-seconds for 20 MiB over 2 s or more)",
	       (unsigned long long)t.disk_byte_seconds);
	sbx_sandbox_unref(sb);
	test_manager_close(&x, "no container of the brief run is left");
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s TYPE DISK_URL IMAGE PLAIN_URL\n", argv[0]);
		return 2;
	}
	fixture_init(argc, argv, "disk");
	test_refused(argv[4]);
	test_bound();
	test_meter();
	test_meter_short_lived();
	return fixture_end();
}
