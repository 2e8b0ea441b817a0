/* SPDX-License-Identifier: MIT */
/* Content types of artifacts, by file extension (include/sbx/sandbox.h). */
#include <string.h>
#include <strings.h>

#include "sbx/common.h"
#include "sbx/sandbox.h"

static const struct {
	const char *ext;
	const char *type;
} types[] = {
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"svg", "image/svg+xml"},
    {"webp", "image/webp"},
    {"bmp", "image/bmp"},
    {"ico", "image/x-icon"},
    {"tif", "image/tiff"},
    {"tiff", "image/tiff"},
    {"pdf", "application/pdf"},
    {"csv", "text/csv; charset=utf-8"},
    {"tsv", "text/tab-separated-values; charset=utf-8"},
    {"json", "application/json"},
    {"geojson", "application/geo+json"},
    {"html", "text/html; charset=utf-8"},
    {"htm", "text/html; charset=utf-8"},
    {"txt", "text/plain; charset=utf-8"},
    {"log", "text/plain; charset=utf-8"},
    {"md", "text/plain; charset=utf-8"},
    {"py", "text/plain; charset=utf-8"},
    {"ipynb", "application/x-ipynb+json"},
    {"xml", "application/xml"},
    {"zip", "application/zip"},
    {"gz", "application/gzip"},
    {"tar", "application/x-tar"},
    {"parquet", "application/vnd.apache.parquet"},
    {"xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
    {"npy", "application/octet-stream"},
    {"mp3", "audio/mpeg"},
    {"wav", "audio/wav"},
    {"mp4", "video/mp4"},
};

const char *sbx_mime_type(const char *path)
{
	const char *base, *dot;

	if (!path)
		return "application/octet-stream";
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	dot = strrchr(base, '.');
	if (!dot || dot == base)
		return "application/octet-stream";
	for (size_t i = 0; i < SBX_ARRAY_SIZE(types); i++)
		if (strcasecmp(dot + 1, types[i].ext) == 0)
			return types[i].type;
	return "application/octet-stream";
}
