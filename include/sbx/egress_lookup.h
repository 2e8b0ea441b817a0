/* SPDX-License-Identifier: MIT */
/*
 * Where a tenant's own egress allow-list comes from: the contract between
 * the program's glue that answers (the API keys: sbx_tools_egress_lookup),
 * the sandbox manager that passes it on (sbx_manager_set_egress_lookup) and
 * a sandbox's relay that asks (src/egress).
 */
#ifndef SBX_EGRESS_LOOKUP_H
#define SBX_EGRESS_LOOKUP_H

#include <stddef.h>

/* Called from a sandbox's relay with the sandbox's OWNER as each
 * connection is decided, under the relay's lock: it must not call into the
 * manager. 1 with the list in BUF ("none", or HOST[:PORT],... as
 * sandbox.egress_allow takes them), 0 when OWNER has none of its own
 * (sandbox.egress_allow applies), negative when it cannot be known now (no
 * host is allowed then: fail closed). */
typedef int (*sbx_egress_lookup_fn)(void *userdata, const char *owner, char *buf, size_t size);
/* Bytes BUF has for a list. */
#define SBX_EGRESS_LIST_MAX 1024

#endif
