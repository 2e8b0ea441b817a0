/* SPDX-License-Identifier: MIT */
/*
 * What a file server says about a file, as RFC 9110 asks: its validators
 * (a strong ETag from inode, size and modification time; Last-Modified),
 * the conditions a request puts on them (If-None-Match, If-Modified-Since,
 * If-Range) and a single byte range (Range: bytes=A-B, A-, -N). Pure: the
 * artifact route calls these, the tests and fuzzers too. Dates are parsed by
 * libcurl's curl_getdate (the three forms of HTTP-date and more).
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "http-internal.h"

void sbx_file_etag(const struct sbx_artifact_info *info, char out[SBX_ETAG_MAX])
{
	snprintf(out, SBX_ETAG_MAX, "\"%" PRIx64 "-%" PRIx64 "-%" PRIx64 "\"", info->ino,
		 (uint64_t)info->size, (uint64_t)info->mtime_ns);
}

void sbx_http_date(int64_t t, char out[SBX_HTTP_DATE_MAX])
{
	static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
	static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
					   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
	time_t tt = (time_t)t;
	struct tm tm;

	/* Not strftime: its names follow the locale. */
	if (t < 0 || !gmtime_r(&tt, &tm) || tm.tm_year > 8099) {
		tt = 0;
		gmtime_r(&tt, &tm);
	}
	snprintf(out, SBX_HTTP_DATE_MAX, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday],
		 tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
		 tm.tm_sec);
}

/* Seconds of the HTTP-date V, or -1 when it is none. */
static int64_t date_of(const char *v)
{
	time_t t;

	if (!v || strlen(v) > 64)
		return -1;
	t = curl_getdate(v, NULL);
	return t < 0 ? -1 : (int64_t)t;
}

/* Whether LIST (If-None-Match: "*" or entity-tags, comma-separated) names
 * ETAG by the weak comparison (W/ ignored). */
static bool etag_listed(const char *list, const char *etag)
{
	const char *p = list;
	size_t elen = strlen(etag);

	while (*p) {
		const char *start;

		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		if (!*p)
			break;
		if (*p == '*')
			return true;
		if (!strncmp(p, "W/", 2))
			p += 2;
		if (*p != '"')
			return false; /* malformed: nothing matches */
		start = p;
		p = strchr(p + 1, '"');
		if (!p)
			return false;
		p++;
		if ((size_t)(p - start) == elen && !memcmp(start, etag, elen))
			return true;
	}
	return false;
}

bool sbx_file_not_modified(const char *if_none_match, const char *if_modified_since,
			   const struct sbx_artifact_info *info)
{
	char etag[SBX_ETAG_MAX];

	if (if_none_match) {
		sbx_file_etag(info, etag);
		return etag_listed(if_none_match, etag);
	}
	if (if_modified_since) {
		int64_t since = date_of(if_modified_since);
		return since >= 0 && info->mtime_ns / 1000000000 <= since;
	}
	return false;
}

bool sbx_file_if_range(const char *if_range, const struct sbx_artifact_info *info, int64_t now)
{
	char etag[SBX_ETAG_MAX];
	int64_t t;

	if (!if_range)
		return true;
	if (if_range[0] == '"') {
		/* The strong comparison: a weak tag never matches. */
		sbx_file_etag(info, etag);
		return strcmp(if_range, etag) == 0;
	}
	if (!strncmp(if_range, "W/", 2))
		return false;
	/* A date matches only when it is exactly the file's, and only when it
	 * is a strong validator: at least a second before now, so that no
	 * other version can have had it (RFC 9110 13.1.5). */
	t = date_of(if_range);
	return t >= 0 && t == info->mtime_ns / 1000000000 && t < now;
}

/* A decimal of at most 18 digits at *P (moved past it). */
static bool number(const char **p, int64_t *ret)
{
	int64_t v = 0;
	int digits = 0;

	for (; **p >= '0' && **p <= '9'; (*p)++) {
		if (++digits > 18)
			return false;
		v = v * 10 + (**p - '0');
	}
	*ret = v;
	return digits > 0;
}

int sbx_file_range_parse(const char *v, struct sbx_byte_range *ret)
{
	const char *p = v;
	struct sbx_byte_range r = {.first = -1, .last = -1, .suffix = -1};

	if (!v || strncmp(p, "bytes=", 6) != 0)
		return 0;
	p += 6;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p == '-') {
		p++;
		if (!number(&p, &r.suffix))
			return 0;
	} else {
		if (!number(&p, &r.first) || *p++ != '-')
			return 0;
		if (*p >= '0' && *p <= '9' && (!number(&p, &r.last) || r.last < r.first))
			return 0;
	}
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p) /* several ranges, or anything else: served whole */
		return 0;
	*ret = r;
	return 1;
}

int sbx_file_range_resolve(const struct sbx_byte_range *r, int64_t size, int64_t *ret_offset,
			   int64_t *ret_count)
{
	if (r->suffix >= 0) {
		if (r->suffix == 0 || size == 0)
			return -1;
		*ret_count = r->suffix < size ? r->suffix : size;
		*ret_offset = size - *ret_count;
		return 0;
	}
	if (r->first >= size)
		return -1;
	*ret_offset = r->first;
	*ret_count = (r->last < 0 || r->last >= size ? size - 1 : r->last) - r->first + 1;
	return 0;
}
