/* SPDX-License-Identifier: MIT */
#include "sandbox-internal.h"
