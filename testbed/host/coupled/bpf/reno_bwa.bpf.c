// SPDX-License-Identifier: GPL-2.0
/*
 * reno_bwa: NewReno with P3's Bandwidth-Aware slow-start threshold (Tsukamoto et al.,
 * IEICE Trans. Commun. E89-B(6), 2006, section 3.2, eq. 1).  See handover.h.
 */
#include "handover.h"

HANDOVER_CC(reno_bwa, SCHEME_BWA);
