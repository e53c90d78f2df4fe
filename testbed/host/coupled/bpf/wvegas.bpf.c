// SPDX-License-Identifier: GPL-2.0
/*
 * wVegas, weighted Vegas: Y. Cao, M. Xu, X. Fu, "Delay-based congestion control for
 * multipath TCP", IEEE ICNP 2012, section III.
 *
 * Once per round trip on subflow r, with base_r its smallest RTT ever seen and rtt_r the
 * smallest RTT of the round just ended:
 *     diff_r  = w_r (rtt_r - base_r) / rtt_r            (segments queued in the network)
 *     alpha_r = total_alpha * (w_r / rtt_r) / sum_k (w_k / rtt_k)      (total_alpha = 10)
 *   in slow start: if diff_r > gamma (1): w_r <- min(w_r, w_r base_r / rtt_r + 1) and
 *                  ssthresh <- min(ssthresh, w_r - 1) (leave slow start)
 *   else:          w_r <- w_r - 1 if diff_r > alpha_r, w_r + 1 if diff_r < alpha_r
 * Within a round, slow start grows per ACK as NewReno.  On a loss: w_r / 2.
 */
#include "coupled.h"

#define TOTAL_ALPHA 10
#define GAMMA 1

static __always_inline bool after(__u32 a, __u32 b)
{
	return (__s32)(b - a) < 0;
}

SEC("struct_ops/wvegas_init")
void BPF_PROG(wvegas_init, struct sock *sk)
{
	coupled_join(sk);
	priv_of(sk)->beg_snd_nxt = tcp_sk(sk)->snd_nxt;
}

SEC("struct_ops/wvegas_release")
void BPF_PROG(wvegas_release, struct sock *sk)
{
	coupled_leave(sk);
}

SEC("struct_ops/wvegas_pkts_acked")
void BPF_PROG(wvegas_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct coupled_priv *ca = priv_of(sk);
	__s32 rtt = sample->rtt_us;
	__u32 v;

	if (rtt < 0)
		return;
	v = (__u32)rtt + 1;
	if (!ca->base_us || v < ca->base_us)
		ca->base_us = v;
	if (!ca->round_min_us || v < ca->round_min_us)
		ca->round_min_us = v;
}

SEC("struct_ops/wvegas_cong_avoid")
void BPF_PROG(wvegas_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct coupled_priv *ca = priv_of(sk);
	struct conn_state *st;
	struct agg a;
	__u32 self = ca->slot, w, rtt, base, in_ss;
	__u64 diff, alpha;

	st = coupled_state(sk);
	if (!st || self >= MAX_SUBFLOWS) {
		tcp_reno_cong_avoid(sk, ack, acked);
		return;
	}
	if (!after(ack, ca->beg_snd_nxt)) {
		if (in_slow_start(tp))
			tcp_slow_start(tp, acked);
		st->s[self].cwnd = tp->snd_cwnd;
		return;
	}
	ca->beg_snd_nxt = tp->snd_nxt;
	rtt = ca->round_min_us;
	base = ca->base_us;
	ca->round_min_us = 0;
	if (!rtt || !base) {                        /* no RTT sample this round */
		tcp_reno_cong_avoid(sk, ack, acked);
		st->s[self].cwnd = tp->snd_cwnd;
		return;
	}
	st->s[self].rtt_us = rtt;
	st->s[self].aux = base;
	gather(&a, ca->conn, self, false);
	w = tp->snd_cwnd;
	in_ss = in_slow_start(tp);
	diff = (((__u64)w * (rtt - (base < rtt ? base : rtt))) << 10) / rtt;  /* 2^-10 */
	alpha = a.sum ? ((__u64)TOTAL_ALPHA * a.xself << 10) / a.sum : (TOTAL_ALPHA << 10);
	if (in_ss) {
		if (diff > (GAMMA << 10)) {
			__u32 target = (__u32)(((__u64)w * base) / rtt) + 1;

			if (target < w)
				w = target;
			if (w < 2)
				w = 2;
			tp->snd_ssthresh = tp->snd_ssthresh < w - 1 ? tp->snd_ssthresh : w - 1;
		} else {
			tcp_slow_start(tp, acked);
			w = tp->snd_cwnd;
		}
	} else if (diff > alpha) {
		w = w > 2 ? w - 1 : 2;
	} else if (diff < alpha) {
		w = w + 1 < tp->snd_cwnd_clamp ? w + 1 : tp->snd_cwnd_clamp;
	}
	trace_put(st, KIND_ROUND, self, acked, in_ss, w);
	tp->snd_cwnd = w;
	st->s[self].cwnd = w;
}

SEC("struct_ops/wvegas_ssthresh")
__u32 BPF_PROG(wvegas_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops/wvegas_undo_cwnd")
__u32 BPF_PROG(wvegas_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops wvegas = {
	.init = (void *)wvegas_init,
	.release = (void *)wvegas_release,
	.pkts_acked = (void *)wvegas_pkts_acked,
	.cong_avoid = (void *)wvegas_cong_avoid,
	.ssthresh = (void *)wvegas_ssthresh,
	.undo_cwnd = (void *)wvegas_undo_cwnd,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = "wvegas",
};
