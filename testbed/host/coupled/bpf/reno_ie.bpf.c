// SPDX-License-Identifier: GPL-2.0
/*
 * reno_ie: NewReno with P3's Immediate Expiration of the timeout timer (Tsukamoto et
 * al., IEICE Trans. Commun. E89-B(6), 2006, section 3.1).  See handover.h.
 */
#include "handover.h"

HANDOVER_CC(reno_ie, SCHEME_IE);
