/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox-internal.h"

void sbx_install_list_free(struct sbx_install *list)
{
	while (list) {
		struct sbx_install *next = list->next;
		free(list->spec);
		free(list->version);
		free(list->log_tail);
		free(list);
		list = next;
	}
}

char **sbx_sandbox_packages(sbx_manager *m, sbx_sandbox *sb)
{
	(void)m;
	(void)sb;
	return calloc(1, sizeof(char *));
}
