/* SPDX-License-Identifier: MIT */
/*
 * The test package index the install tests share (test-tools, test-quota):
 * tests/pkgindex.py serving a temporary folder on the loopback, one per
 * program. Test-only.
 */
#ifndef SBX_TESTS_PKG_INDEX_H
#define SBX_TESTS_PKG_INDEX_H

#include <stddef.h>

/* Makes the folder /tmp/sbx-NAME-index-XXXXXX and starts
 * $SBX_SRCDIR/tests/pkgindex.py on it; its simple index URL
 * (http://127.0.0.1:PORT/simple/) into URL. 0, or -errno (-EIO when the
 * index did not say its port). Call pkg_index_stop in either case. */
int pkg_index_start(const char *name, char *url, size_t size);
/* The index's folder (what pkgindex.py reads), once started. */
const char *pkg_index_root(void);
/* Stops the index (if it runs) and removes its folder. */
void pkg_index_stop(void);

#endif
