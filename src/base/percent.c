/* SPDX-License-Identifier: MIT */
/*
 * Percent-encoding through libcurl. curl_easy_escape and curl_easy_unescape
 * take a NULL handle (documented since curl 7.82; older releases only pass
 * it to character-set conversions that non-EBCDIC builds do not have).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "sbx/common.h"
#include "sbx/percent.h"

static int append_escaped(struct sbx_buf *b, const char *s, size_t n)
{
	char *e;
	int r;

	if (n == 0)
		return 0;
	if (n > INT_MAX)
		return -ENOMEM;
	e = curl_easy_escape(NULL, s, (int)n);
	if (!e)
		return -ENOMEM;
	r = sbx_buf_append(b, e, strlen(e));
	curl_free(e);
	return r;
}

int sbx_percent_append(struct sbx_buf *b, const char *s, bool keep_slash)
{
	for (;;) {
		const char *slash = keep_slash ? strchr(s, '/') : NULL;
		size_t n = slash ? (size_t)(slash - s) : strlen(s);
		int r = append_escaped(b, s, n);

		if (r < 0)
			return r;
		if (!slash)
			return 0;
		r = sbx_buf_append(b, "/", 1);
		if (r < 0)
			return r;
		s = slash + 1;
	}
}

char *sbx_percent_escape(const char *s)
{
	struct sbx_buf b = SBX_BUF_INIT;

	if (sbx_percent_append(&b, s, false) < 0) {
		sbx_buf_release(&b);
		return NULL;
	}
	return sbx_buf_steal(&b);
}

int sbx_percent_decode(const char *s, size_t len, char **ret_out, size_t *ret_len)
{
	char *d, *out;
	int n = 0;

	/* curl leaves a malformed escape as it is; here it is an error. */
	for (size_t i = 0; i < len; i++)
		if (s[i] == '%' && (len - i < 3 || !isxdigit((unsigned char)s[i + 1]) ||
				    !isxdigit((unsigned char)s[i + 2])))
			return -EINVAL;
	if (len > INT_MAX)
		return -ENOMEM;
	d = curl_easy_unescape(NULL, len ? s : "", (int)len, &n);
	if (!d)
		return -ENOMEM;
	/* Out of curl's allocator into ours, so the caller frees it with free(). */
	out = malloc((size_t)n + 1);
	if (out) {
		memcpy(out, d, (size_t)n);
		out[n] = '\0';
	}
	curl_free(d);
	if (!out)
		return -ENOMEM;
	*ret_out = out;
	*ret_len = (size_t)n;
	return 0;
}

/* Whether the segment S[0..N) (up to a ';' parameter) is "." or "..", its
 * dots perhaps written %2e. */
static bool dot_segment(const char *s, size_t n)
{
	size_t dots = 0;

	for (size_t i = 0; i < n && s[i] != ';'; dots++) {
		if (s[i] == '.')
			i++;
		else if (i + 2 < n && s[i] == '%' && s[i + 1] == '2' && (s[i + 2] | 0x20) == 'e')
			i += 3;
		else
			return false;
	}
	return dots == 1 || dots == 2;
}

bool sbx_path_is_clean(const char *s, size_t n, const char **ret_what)
{
	static const char *const encoded[] = {"%2f", "%5c", "%00", "%25"};
	const char *what = NULL;
	size_t seg = 1;

	if (n == 0 || s[0] != '/') {
		what = "it does not start with /";
		goto out;
	}
	for (size_t i = 1; i <= n && !what; i++) {
		if (i < n && s[i] == '\\') {
			what = "a backslash";
		} else if (i < n && s[i] == '%') {
			if (i + 2 >= n || !isxdigit((unsigned char)s[i + 1]) ||
			    !isxdigit((unsigned char)s[i + 2])) {
				what = "a % that does not start a %XX escape";
				break;
			}
			for (size_t k = 0; k < SBX_ARRAY_SIZE(encoded); k++)
				if (strncasecmp(s + i, encoded[k], 3) == 0)
					what = "an encoded slash, backslash, NUL or percent sign";
		} else if (i == n || s[i] == '/') {
			if (i == seg && i < n)
				what = "an empty segment (//)";
			else if (dot_segment(s + seg, i - seg))
				what = "a dot segment (. or ..)";
			seg = i + 1;
		}
	}
out:
	if (ret_what)
		*ret_what = what;
	return what == NULL;
}
