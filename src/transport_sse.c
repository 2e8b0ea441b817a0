/* SPDX-License-Identifier: MIT */
/* placeholder */
typedef int sbx_placeholder_transport_sse;
