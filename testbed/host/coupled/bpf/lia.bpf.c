// SPDX-License-Identifier: GPL-2.0
/*
 * LIA, the Linked Increases Algorithm: RFC 6356 (Raiciu, Handley, Wischik, 2011),
 * "Coupled Congestion Control for Multipath Transport Protocols", section 3.
 *
 * Per acknowledged segment on subflow i (windows in segments, so the RFC's
 * bytes_acked * MSS_i terms become 1 segment):
 *     increase_i = min(alpha / cwnd_total, 1 / cwnd_i)
 *     alpha / cwnd_total = max_j(cwnd_j / rtt_j^2) / (sum_j cwnd_j / rtt_j)^2
 * On a loss: cwnd_i / 2 (as NewReno).  Slow start as NewReno.
 */
#include "coupled.h"

SEC("struct_ops/lia_init")
void BPF_PROG(lia_init, struct sock *sk)
{
	coupled_join(sk);
}

SEC("struct_ops/lia_release")
void BPF_PROG(lia_release, struct sock *sk)
{
	coupled_leave(sk);
}

SEC("struct_ops/lia_cong_avoid")
void BPF_PROG(lia_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct coupled_priv *ca = priv_of(sk);
	struct conn_state *st;
	struct agg a;
	__u32 self = ca->slot;
	__s64 coupled, alone, inc;

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
	coupled = (__s64)ratio_sq(a.best, a.sum, FP_SHIFT);
	alone = FP / (tp->snd_cwnd ? tp->snd_cwnd : 1);
	inc = coupled < alone ? coupled : alone;
	trace_put(st, KIND_INCREASE, self, acked, 0, inc);
	apply_increase(sk, acked, inc);
	st->s[self].cwnd = tp->snd_cwnd;
}

SEC("struct_ops/lia_ssthresh")
__u32 BPF_PROG(lia_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops/lia_undo_cwnd")
__u32 BPF_PROG(lia_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops lia = {
	.init = (void *)lia_init,
	.release = (void *)lia_release,
	.cong_avoid = (void *)lia_cong_avoid,
	.ssthresh = (void *)lia_ssthresh,
	.undo_cwnd = (void *)lia_undo_cwnd,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = "lia",
};
