/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the INI settings (src/base/settings.c). The input is a
 * settings file (sbx_settings_load_file reads it from a memfd through
 * /proc/self/fd), then each of its lines is an override (sbx_settings_set).
 * Checks the round trip: whenever the file loads, what sbx_settings_dump
 * writes loads again into fresh settings and dumps to the same text; a
 * failed load or override has a message.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sbx/settings.h"

static int fd_in = -1, fd_dump = -1, fd_dump2 = -1;
static char path_in[64], path_dump[64];

static int memfd(const char *name, char *path, size_t n)
{
	int fd = memfd_create(name, MFD_CLOEXEC);

	if (fd < 0)
		abort();
	if (path)
		snprintf(path, n, "/proc/self/fd/%d", fd);
	return fd;
}

static void put(int fd, const void *p, size_t n)
{
	if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0)
		abort();
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w <= 0)
			abort();
		p = (const char *)p + w;
		n -= (size_t)w;
	}
}

/* S dumped into FD; returns the text (malloc'd) and its length. */
static char *dump(const struct sbx_settings *s, int fd, size_t *ret_len)
{
	FILE *f;
	char *text;
	long n;

	if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0)
		abort();
	f = fdopen(dup(fd), "w+");
	if (!f)
		abort();
	if (sbx_settings_dump(s, f) < 0 || fflush(f) != 0)
		abort();
	n = ftell(f);
	text = malloc((size_t)n + 1);
	if (!text || fseek(f, 0, SEEK_SET) != 0 || fread(text, 1, (size_t)n, f) != (size_t)n)
		abort();
	text[n] = '\0';
	fclose(f);
	*ret_len = (size_t)n;
	return text;
}

static void round_trip(const struct sbx_settings *s)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings again;
	char *a, *b;
	size_t alen, blen;

	a = dump(s, fd_dump, &alen);
	if (sbx_settings_init(&again) < 0)
		abort();
	if (sbx_settings_load_file(&again, path_dump, &err) < 0) {
		fprintf(stderr, "fuzz-settings: the dump does not load: %s\n--\n%s--\n", err.msg,
			a);
		abort();
	}
	b = dump(&again, fd_dump2, &blen);
	if (alen != blen || memcmp(a, b, alen) != 0) {
		fprintf(stderr, "fuzz-settings: the dump changes on reload:\n%s--\n%s--\n", a, b);
		abort();
	}
	free(a);
	free(b);
	sbx_settings_release(&again);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fd_in = memfd("fuzz-settings", path_in, sizeof(path_in));
	fd_dump = memfd("fuzz-settings-dump", path_dump, sizeof(path_dump));
	fd_dump2 = memfd("fuzz-settings-dump2", NULL, 0);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_error err = SBX_ERROR_INIT;
	struct sbx_settings s;
	char *line;

	if (sbx_settings_init(&s) < 0)
		return 0;
	put(fd_in, data, size);
	if (sbx_settings_load_file(&s, path_in, &err) == 0)
		round_trip(&s);
	else if (!err.msg[0] || err.code >= 0)
		abort();
	sbx_settings_release(&s);

	/* Every line as a --set override, on the defaults. */
	if (sbx_settings_init(&s) < 0)
		return 0;
	line = malloc(size + 1);
	if (!line)
		abort();
	for (size_t i = 0; i < size;) {
		size_t n = 0;
		while (i + n < size && data[i + n] != '\n')
			n++;
		memcpy(line, data + i, n);
		line[n] = '\0';
		sbx_error_clear(&err);
		if (sbx_settings_set(&s, line, &err) < 0 && !err.msg[0])
			abort();
		i += n + 1;
	}
	round_trip(&s);
	free(line);
	sbx_settings_release(&s);
	return 0;
}
