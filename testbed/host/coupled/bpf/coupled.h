/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared state of the coupled MPTCP congestion controls (lia, olia, balia, wvegas).
 *
 * Upstream Linux runs a plain per-socket congestion control on each MPTCP subflow.  A
 * coupled control must see the other subflows of its connection, so each subflow
 * publishes its window and RTT into a slot of its connection's entry in the hash map
 * `conns`, keyed by the address of the MPTCP connection socket (read from the subflow's
 * ULP context with CO-RE probe reads; the key is only compared, never dereferenced).
 * A socket that is not an MPTCP subflow gets connection key 0 and behaves like NewReno.
 *
 * Each control logs its decisions into the ring `trace` (inputs: every subflow's window
 * and RTT as the decision saw them; output: the window increase per acknowledged
 * segment in 2^-20 segments, the new ssthresh, or the per-round step), so that
 * testbed.host.coupled.reference can recompute them from the same inputs.
 *
 * Arithmetic is integer: RTTs are normalised by the largest RTT of the connection
 * (k_i = 1024 * rtt_max / rtt_i) so that w_i / rtt_i^2 terms keep their precision.
 */
#ifndef TESTBED_COUPLED_H
#define TESTBED_COUPLED_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char _license[] SEC("license") = "GPL";

#define TCP_CONG_NON_RESTRICTED 0x1
#define MAX_SUBFLOWS 8
#define FP_SHIFT 20                 /* increases are in 2^-20 segments per acked segment */
#define FP (1LL << FP_SHIFT)
#define TRACE_SLOTS 4096            /* a power of two */
#define K_MAX (256ULL << 10)

#define KIND_INCREASE 1
#define KIND_SSTHRESH 2
#define KIND_ROUND 3

extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

struct subflow_slot {
	__u64 sk;        /* the subflow socket's address (0: free slot) */
	__u32 cwnd;      /* segments */
	__u32 rtt_us;    /* smoothed RTT (wvegas: the last round's smallest RTT) */
	__u32 aux;       /* olia: KiB acked between the last two losses; wvegas: base RTT */
	__u32 aux2;      /* olia: KiB acked since the last loss */
};

struct conn_state {
	struct subflow_slot s[MAX_SUBFLOWS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct conn_state);
} conns SEC(".maps");

struct trace_rec {
	__u64 seq;       /* 1, 2, ... (0: never written) */
	__u32 kind;      /* KIND_* */
	__u32 self;      /* the deciding subflow's slot */
	__u32 acked;     /* segments acknowledged by this ACK */
	__u32 in_ss;     /* wvegas: the subflow was in slow start */
	__u32 cwnd[MAX_SUBFLOWS];
	__u32 rtt_us[MAX_SUBFLOWS];
	__u32 aux[MAX_SUBFLOWS];
	__u32 aux2[MAX_SUBFLOWS];
	__s64 out;       /* increase (2^-20 segments per acked segment), ssthresh or step */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TRACE_SLOTS);
	__type(key, __u32);
	__type(value, struct trace_rec);
} trace SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} trace_seq SEC(".maps");

/* Per-socket private area (inside icsk_ca_priv: at most 104 bytes). */
struct coupled_priv {
	__u64 conn;      /* connection key, 0: not an MPTCP subflow */
	__s64 acc;       /* window change owed, in 2^-20 segments */
	__u32 slot;      /* our slot in conns[conn] */
	__u32 beg_snd_nxt; /* wvegas: end of the current round */
	__u32 round_min_us; /* wvegas: smallest RTT this round (0: none) */
	__u32 base_us;   /* wvegas: smallest RTT seen */
	__u32 ell_cur;   /* olia: bytes acked since the last loss, in KiB */
	__u32 ell_prev;  /* olia: bytes acked between the two last losses, in KiB */
	__u32 bytes_rem; /* olia: acked bytes not yet counted in KiB */
};

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct coupled_priv *priv_of(const struct sock *sk)
{
	return (struct coupled_priv *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline __u64 conn_key(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct mptcp_subflow_context *ctx;
	struct sock *conn = NULL;

	if (!BPF_CORE_READ_BITFIELD(tp, is_mptcp))
		return 0;
	ctx = (struct mptcp_subflow_context *)BPF_CORE_READ(icsk, icsk_ulp_data);
	if (!ctx)
		return 0;
	conn = BPF_CORE_READ(ctx, conn);
	return (__u64)conn;
}

static __always_inline bool in_slow_start(const struct tcp_sock *tp)
{
	return tp->snd_cwnd < tp->snd_ssthresh;
}

static __always_inline bool cwnd_limited(const struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	if (in_slow_start(tp))
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return !!BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited);
}

static __always_inline __u32 srtt_us(const struct tcp_sock *tp)
{
	__u32 r = tp->srtt_us >> 3;

	return r ? r : 1;
}

/* Join (or create) the connection's entry and claim a slot. */
static __always_inline void coupled_join(struct sock *sk)
{
	struct coupled_priv *ca = priv_of(sk);
	struct conn_state zero = {};
	struct conn_state *st;
	__u64 key = conn_key(sk);
	__u64 me = (__u64)sk;
	int i;

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->slot = MAX_SUBFLOWS;
	if (!key)
		return;
	st = bpf_map_lookup_elem(&conns, &key);
	if (!st) {
		bpf_map_update_elem(&conns, &key, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&conns, &key);
		if (!st)
			return;
	}
	for (i = 0; i < MAX_SUBFLOWS; i++) {
		if (__sync_val_compare_and_swap(&st->s[i].sk, 0, me) == 0) {
			ca->conn = key;
			ca->slot = i;
			st->s[i].cwnd = tcp_sk(sk)->snd_cwnd;
			st->s[i].rtt_us = srtt_us(tcp_sk(sk));
			return;
		}
	}
}

/* Leave the connection; the last subflow removes its entry. */
static __always_inline void coupled_leave(struct sock *sk)
{
	struct coupled_priv *ca = priv_of(sk);
	struct conn_state *st;
	__u64 key = ca->conn;
	__u32 slot = ca->slot;
	int i;

	if (!key || slot >= MAX_SUBFLOWS)
		return;
	st = bpf_map_lookup_elem(&conns, &key);
	ca->conn = 0;
	if (!st)
		return;
	st->s[slot].cwnd = 0;
	st->s[slot].rtt_us = 0;
	st->s[slot].aux = 0;
	st->s[slot].aux2 = 0;
	st->s[slot].sk = 0;
	for (i = 0; i < MAX_SUBFLOWS; i++)
		if (st->s[i].sk)
			return;
	bpf_map_delete_elem(&conns, &key);
}

/* Our connection's entry with our slot brought up to date (NULL: uncoupled). */
static __always_inline struct conn_state *coupled_state(struct sock *sk)
{
	struct coupled_priv *ca = priv_of(sk);
	struct conn_state *st;
	__u32 slot = ca->slot;
	__u64 key = ca->conn;

	if (!key || slot >= MAX_SUBFLOWS)
		return NULL;
	st = bpf_map_lookup_elem(&conns, &key);
	if (!st)
		return NULL;
	st->s[slot].cwnd = tcp_sk(sk)->snd_cwnd;
	return st;
}

static __always_inline void trace_put(struct conn_state *st, __u32 kind, __u32 self,
				      __u32 acked, __u32 in_ss, __s64 out)
{
	__u32 zero = 0, idx;
	__u64 *seq = bpf_map_lookup_elem(&trace_seq, &zero);
	struct trace_rec *rec;
	__u64 n;
	int i;

	if (!seq)
		return;
	n = __sync_fetch_and_add(seq, 1) + 1;
	idx = (__u32)(n & (TRACE_SLOTS - 1));
	rec = bpf_map_lookup_elem(&trace, &idx);
	if (!rec)
		return;
	rec->seq = n;
	rec->kind = kind;
	rec->self = self;
	rec->acked = acked;
	rec->in_ss = in_ss;
	for (i = 0; i < MAX_SUBFLOWS; i++) {
		rec->cwnd[i] = st->s[i].cwnd;
		rec->rtt_us[i] = st->s[i].rtt_us;
		rec->aux[i] = st->s[i].aux;
		rec->aux2[i] = st->s[i].aux2;
	}
	rec->out = out;
}

/* Apply `acked` segments times `inc` (2^-20 segments each) to the window, carrying the
 * remainder; a negative total shrinks the window (olia), never below 1 segment. */
static __always_inline void apply_increase(struct sock *sk, __u32 acked, __s64 inc)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct coupled_priv *ca = priv_of(sk);
	__s64 acc = ca->acc + (__s64)acked * inc;
	__u32 cwnd = tp->snd_cwnd;

	if (acc >= FP) {
		__u64 n = (__u64)acc >> FP_SHIFT;

		acc -= (__s64)(n << FP_SHIFT);
		cwnd += (__u32)n;
		if (cwnd > tp->snd_cwnd_clamp)
			cwnd = tp->snd_cwnd_clamp;
	} else if (acc <= -FP) {
		__u64 n = (__u64)(-acc) >> FP_SHIFT;

		acc += (__s64)(n << FP_SHIFT);
		cwnd = cwnd > n + 1 ? cwnd - (__u32)n : 1;
	}
	ca->acc = acc;
	tp->snd_cwnd = cwnd;
}

/*
 * What a decision needs from every subflow of the connection, gathered with bpf_loop so
 * the verifier checks each step once (an unrolled loop with branches over 8 slots makes
 * it explore too many paths).  k_i = 1024 * rtt_max / rtt_i (at most K_MAX); free slots
 * have cwnd 0 and count for nothing.
 */
struct agg {
	__u64 key;
	__u32 self;
	__u32 rmax;
	__u32 n;         /* subflows with a window */
	__u32 wmax;      /* largest window */
	__u64 sum;       /* sum of cwnd_i * k_i             (~ sum w/rtt) */
	__u64 best;      /* max of cwnd_i * k_i^2            (~ max w/rtt^2) */
	__u64 mine;      /* cwnd_self * k_self^2 */
	__u64 xmax;      /* max of cwnd_i * k_i              (~ max w/rtt) */
	__u64 xself;     /* cwnd_self * k_self */
	__u64 lmax;      /* olia: max of ell_i^2 * k_i       (~ max l^2/rtt) */
	__u32 n_m;       /* olia: subflows with the largest window */
	__u32 n_bm;      /* olia: best subflows (largest l^2/rtt) without the largest window */
	__u32 self_m;    /* olia: we have the largest window */
	__u32 self_bm;   /* olia: we are best without the largest window */
};

static __always_inline __u64 weight_of(__u32 rmax, __u32 rtt)
{
	__u64 k;

	if (!rtt)
		return 0;
	k = ((__u64)rmax << 10) / rtt;
	return k > K_MAX ? K_MAX : k;
}

static __always_inline __u64 ell_of(struct subflow_slot *s)
{
	__u64 l = s->aux > s->aux2 ? s->aux : s->aux2;

	return l;
}

static long pass_rmax(__u32 i, struct agg *a)
{
	struct conn_state *st = bpf_map_lookup_elem(&conns, &a->key);

	if (!st || i >= MAX_SUBFLOWS)
		return 1;
	if (st->s[i].cwnd && st->s[i].rtt_us > a->rmax)
		a->rmax = st->s[i].rtt_us;
	if (st->s[i].cwnd > a->wmax)
		a->wmax = st->s[i].cwnd;
	return 0;
}

static long pass_sums(__u32 i, struct agg *a)
{
	struct conn_state *st = bpf_map_lookup_elem(&conns, &a->key);
	__u64 c, k, ck, ck2, l;

	if (!st || i >= MAX_SUBFLOWS)
		return 1;
	c = st->s[i].cwnd;
	if (!c)
		return 0;
	k = weight_of(a->rmax, st->s[i].rtt_us);
	ck = c * k;
	ck2 = ck * k;
	l = ell_of(&st->s[i]);
	a->n++;
	a->sum += ck;
	if (ck2 > a->best)
		a->best = ck2;
	if (ck > a->xmax)
		a->xmax = ck;
	if (l * l * k > a->lmax)
		a->lmax = l * l * k;
	if (i == a->self) {
		a->mine = ck2;
		a->xself = ck;
	}
	return 0;
}

static long pass_sets(__u32 i, struct agg *a)
{
	struct conn_state *st = bpf_map_lookup_elem(&conns, &a->key);
	__u64 c, k, l;
	bool in_m, in_b;

	if (!st || i >= MAX_SUBFLOWS)
		return 1;
	c = st->s[i].cwnd;
	if (!c)
		return 0;
	k = weight_of(a->rmax, st->s[i].rtt_us);
	l = ell_of(&st->s[i]);
	in_m = c == a->wmax;
	in_b = l * l * k == a->lmax;
	if (in_m)
		a->n_m++;
	if (in_b && !in_m)
		a->n_bm++;
	if (i == a->self) {
		a->self_m = in_m;
		a->self_bm = in_b && !in_m;
	}
	return 0;
}

/* Fill a for connection key, deciding subflow self; olia: also the sets M and B\M. */
static __always_inline void gather(struct agg *a, __u64 key, __u32 self, bool sets)
{
	__builtin_memset(a, 0, sizeof(*a));
	a->key = key;
	a->self = self;
	a->rmax = 1;
	bpf_loop(MAX_SUBFLOWS, pass_rmax, a, 0);
	bpf_loop(MAX_SUBFLOWS, pass_sums, a, 0);
	if (sets)
		bpf_loop(MAX_SUBFLOWS, pass_sets, a, 0);
}

/* Shift v left until its bit 62 is set; returns the shift (v != 0). */
static __always_inline __u32 normalise(__u64 *v)
{
	__u32 s = 0;
	int i;

	for (i = 0; i < 62; i++) {
		if (*v >> 62)
			break;
		*v <<= 1;
		s++;
	}
	return s;
}

/*
 * num / den^2 in 2^-out units (num = w k^2 and den = sum w k: the 2^10 scale of k
 * cancels): two divisions, each of a numerator shifted up
 * to 63 bits, keep about 28 significant bits whatever the magnitudes.  Results are
 * capped at 16 (2^(out+4)).
 */
static __always_inline __u64 ratio_sq(__u64 num, __u64 den, __u32 out)
{
	__u64 q;
	__u32 a, b, sh;

	if (!den || !num)
		return 0;
	a = normalise(&num);
	q = num / den;
	if (!q)
		return 0;
	b = normalise(&q);
	q = q / den;
	if (a + b < out)
		return 1ULL << (out + 4);
	sh = a + b - out;
	if (sh >= 64)
		return 0;
	q >>= sh;
	return q > (1ULL << (out + 4)) ? (1ULL << (out + 4)) : q;
}

#endif
