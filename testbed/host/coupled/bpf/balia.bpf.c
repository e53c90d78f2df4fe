// SPDX-License-Identifier: GPL-2.0
/*
 * BALIA, the Balanced Linked Adaptation algorithm: Q. Peng, A. Walid, J. Hwang,
 * S. H. Low, "Multipath TCP: Analysis, Design, and Implementation", IEEE/ACM
 * Transactions on Networking 24(1), 2016, section VI (and draft-walid-mptcp-congestion-
 * control-04).
 *
 * With x_k = w_k / rtt_k and alpha_r = max_k x_k / x_r, per acknowledged segment on r:
 *     increase_r = x_r / (rtt_r (sum_k x_k)^2) * (1 + alpha_r) / 2 * (4 + alpha_r) / 5
 * and on a loss:
 *     w_r <- w_r - w_r / 2 * min(alpha_r, 1.5)
 * With one path (alpha = 1) both reduce to NewReno.  Slow start as NewReno.
 *
 * Computed as (x_r + x_max)(4 x_r + x_max) / (10 w_r (sum_k x_k)^2), the same value
 * (alpha_r = x_max / x_r, and rtt_r x_r = w_r), which keeps its precision in integers
 * when alpha_r is large.
 */
#include "coupled.h"

#define ALPHA_MAX (65536ULL << 10)    /* alpha_r above 65536 counts as 65536 (no overflow) */

static __always_inline __u64 alpha_fp10(struct agg *a)
{
	__u64 al;

	if (!a->xself)
		return 1024;
	al = (a->xmax << 10) / a->xself;
	return al > ALPHA_MAX ? ALPHA_MAX : al;
}

SEC("struct_ops/balia_init")
void BPF_PROG(balia_init, struct sock *sk)
{
	coupled_join(sk);
}

SEC("struct_ops/balia_release")
void BPF_PROG(balia_release, struct sock *sk)
{
	coupled_leave(sk);
}

SEC("struct_ops/balia_cong_avoid")
void BPF_PROG(balia_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct coupled_priv *ca = priv_of(sk);
	struct conn_state *st;
	struct agg a;
	__u32 self = ca->slot;
	__u64 xr, xm, sum;
	__s64 inc;
	int i;

	if (!cwnd_limited(sk))
		return;
	st = coupled_state(sk);
	if (!st || self >= MAX_SUBFLOWS) {
		tcp_reno_cong_avoid(sk, ack, acked);
		return;
	}
	st->s[self].rtt_us = srtt_us(tp);
	if (in_slow_start(tp)) {
		acked = tcp_slow_start(tp, acked);
		st->s[self].cwnd = tp->snd_cwnd;
		if (!acked)
			return;
	}
	gather(&a, ca->conn, self, false);
	xr = a.xself;
	xm = a.xmax;
	sum = a.sum;
	for (i = 0; i < 40; i++) {       /* same scale for all: the products fit 64 bits */
		if (!(sum >> 30))
			break;
		sum >>= 1;
		xr >>= 1;
		xm >>= 1;
	}
	inc = (__s64)(ratio_sq((xr + xm) * (4 * xr + xm), sum, FP_SHIFT) /
		      (10 * (__u64)(tp->snd_cwnd ? tp->snd_cwnd : 1)));
	trace_put(st, KIND_INCREASE, self, acked, 0, inc);
	apply_increase(sk, acked, inc);
	st->s[self].cwnd = tp->snd_cwnd;
}

SEC("struct_ops/balia_ssthresh")
__u32 BPF_PROG(balia_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct coupled_priv *ca = priv_of(sk);
	struct conn_state *st = coupled_state(sk);
	__u32 self = ca->slot, w = tp->snd_cwnd, cut, ss;
	struct agg a;
	__u64 al;

	if (!st || self >= MAX_SUBFLOWS)
		return tcp_reno_ssthresh(sk);
	st->s[self].rtt_us = srtt_us(tp);
	gather(&a, ca->conn, self, false);
	al = alpha_fp10(&a);
	if (al > 1536)
		al = 1536;
	cut = (__u32)(((__u64)w * al) >> 11);              /* w / 2 * min(alpha, 1.5) */
	ss = w > cut + 2 ? w - cut : 2;
	trace_put(st, KIND_SSTHRESH, self, 0, 0, ss);
	return ss;
}

SEC("struct_ops/balia_undo_cwnd")
__u32 BPF_PROG(balia_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops balia = {
	.init = (void *)balia_init,
	.release = (void *)balia_release,
	.cong_avoid = (void *)balia_cong_avoid,
	.ssthresh = (void *)balia_ssthresh,
	.undo_cwnd = (void *)balia_undo_cwnd,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = "balia",
};
