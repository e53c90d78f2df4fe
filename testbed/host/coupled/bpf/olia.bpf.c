// SPDX-License-Identifier: GPL-2.0
/*
 * OLIA, the Opportunistic Linked Increases Algorithm: R. Khalili, N. Gast, M. Popovic,
 * J.-Y. Le Boudec, "MPTCP is not Pareto-optimal: performance issues and a possible
 * solution", ACM CoNEXT 2012, and draft-khalili-mptcp-congestion-control-05, section 3.
 *
 * Per acknowledged segment on path r (windows w in segments):
 *     increase_r = (w_r / rtt_r^2) / (sum_p w_p / rtt_p)^2  +  alpha_r / w_r
 * with l_p = max(bytes acked since the last loss, bytes between the two last losses),
 * M = paths with the largest window, B = paths with the largest l_p^2 / rtt_p, and
 *     alpha_r =  1 / (|P| |B\M|)   for r in B\M, if B\M is not empty,
 *     alpha_r = -1 / (|P| |M|)     for r in M,   if B\M is not empty,
 *     alpha_r =  0                 otherwise.
 * On a loss: w_r / 2.  Slow start as NewReno.
 */
#include "coupled.h"

static __always_inline void count_acked(struct sock *sk, struct conn_state *st, __u32 acked)
{
	struct coupled_priv *ca = priv_of(sk);
	__u32 self = ca->slot;
	__u64 bytes = (__u64)ca->bytes_rem + (__u64)acked * tcp_sk(sk)->mss_cache;

	ca->ell_cur += (__u32)(bytes >> 10);
	ca->bytes_rem = (__u32)(bytes & 1023);
	if (self < MAX_SUBFLOWS) {
		st->s[self].aux = ca->ell_prev;
		st->s[self].aux2 = ca->ell_cur;
	}
}

SEC("struct_ops/olia_init")
void BPF_PROG(olia_init, struct sock *sk)
{
	coupled_join(sk);
}

SEC("struct_ops/olia_release")
void BPF_PROG(olia_release, struct sock *sk)
{
	coupled_leave(sk);
}

SEC("struct_ops/olia_cong_avoid")
void BPF_PROG(olia_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct coupled_priv *ca = priv_of(sk);
	struct conn_state *st;
	struct agg a;
	__u32 self = ca->slot;
	__u32 cwnd;
	__s64 inc, step = 0;

	st = coupled_state(sk);
	if (st && self < MAX_SUBFLOWS) {
		count_acked(sk, st, acked);
		st->s[self].rtt_us = srtt_us(tp);
	}
	if (!cwnd_limited(sk))
		return;
	if (!st || self >= MAX_SUBFLOWS) {
		tcp_reno_cong_avoid(sk, ack, acked);
		return;
	}
	if (in_slow_start(tp)) {
		acked = tcp_slow_start(tp, acked);
		st->s[self].cwnd = tp->snd_cwnd;
		if (!acked)
			return;
	}
	gather(&a, ca->conn, self, true);
	cwnd = tp->snd_cwnd ? tp->snd_cwnd : 1;
	/* alpha_r / w_r, in 2^-20 segments (unsigned division, then the sign) */
	if (a.n_bm && a.n) {
		if (a.self_bm)
			step = (__s64)(((__u64)FP / ((__u64)a.n * a.n_bm)) / cwnd);
		else if (a.self_m && a.n_m)
			step = -(__s64)(((__u64)FP / ((__u64)a.n * a.n_m)) / cwnd);
	}
	inc = (__s64)ratio_sq(a.mine, a.sum, FP_SHIFT) + step;
	trace_put(st, KIND_INCREASE, self, acked, 0, inc);
	apply_increase(sk, acked, inc);
	st->s[self].cwnd = tp->snd_cwnd;
}

SEC("struct_ops/olia_ssthresh")
__u32 BPF_PROG(olia_ssthresh, struct sock *sk)
{
	struct coupled_priv *ca = priv_of(sk);
	struct conn_state *st = coupled_state(sk);
	__u32 self = ca->slot;

	ca->ell_prev = ca->ell_cur;
	ca->ell_cur = 0;
	ca->bytes_rem = 0;
	if (st && self < MAX_SUBFLOWS) {
		st->s[self].aux = ca->ell_prev;
		st->s[self].aux2 = 0;
	}
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops/olia_undo_cwnd")
__u32 BPF_PROG(olia_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops olia = {
	.init = (void *)olia_init,
	.release = (void *)olia_release,
	.cong_avoid = (void *)olia_cong_avoid,
	.ssthresh = (void *)olia_ssthresh,
	.undo_cwnd = (void *)olia_undo_cwnd,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = "olia",
};
