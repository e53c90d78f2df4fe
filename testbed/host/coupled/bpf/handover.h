/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Hand-over-aware NewReno: the two schemes of Tsukamoto, Fukuda, Hori and Oie, "New TCP
 * Congestion Control Schemes for Multimodal Mobile Hosts", IEICE Trans. Commun.
 * E89-B(6), 2006, section 3 (study P3).
 *
 *   reno_ie   Immediate Expiration of the timeout timer: when the interface changes, the
 *             sender restarts at once in slow start (cwnd 1), as if the retransmission
 *             timer had just expired.
 *   reno_bwa  Bandwidth-Aware ssthresh: the same restart, then
 *                 ssthresh = max(2, BW x RTT / packet size),
 *             BW = packet size / (lag between the 2nd and 3rd ACK after the restart),
 *             RTT = the time from the restart to the first ACK; applied once per
 *             hand-off, then plain NewReno (the pair's ACKs: see bwa_ack).
 *
 * How the sender learns of the change (testbed.host.handover): at the moment the schedule
 * player brings the link back with its new shape, the notifier in the sender's namespace
 * (1) bumps the generation in `ho_signal` and (2) hands each socket with data in flight
 * an ICMP "fragmentation needed" quoting its oldest unacknowledged byte, with an MTU
 * 8 bytes below the socket's current one.  The kernel then marks every segment in flight
 * lost and retransmits at once (tcp_v4_mtu_reduced -> tcp_simple_retransmit): the only
 * path on Linux 6.1 by which something outside the socket makes it retransmit now instead
 * of waiting for its timer (a BPF congestion control cannot touch the timer).  Cost: the
 * segment size shrinks by 8 bytes per hand-off.  This program then sees the restart:
 *   - from Open/Disorder/Recovery: set_state(TCP_CA_Loss); it sets cwnd = 1 and
 *     ssthresh = max(cwnd / 2, 2), what the timer's expiry would have set;
 *   - already in Loss (the timer had fired during the outage, cwnd is already 1): on the
 *     first ACK after the signal;
 *   - (the ICMP had no effect) when the timer fires again: logged as such, so that a
 *     restart that waited for the timer is never counted as immediate.
 *
 * Every socket publishes what the notifier needs (its 4-tuple, snd_una, MSS, header
 * length) into `ho_socks` on every ACK.  Every restart (and, for reno_bwa, its estimate)
 * is logged into the ring `ho_log`, read after the run into samples/handover-<cc>.jsonl.
 */
#ifndef TESTBED_HANDOVER_H
#define TESTBED_HANDOVER_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>

char _license[] SEC("license") = "GPL";

#define TCP_CONG_NON_RESTRICTED 0x1
#define HO_LOG_SLOTS 256            /* a power of two */
#define HO_SSTHRESH_MAX 65535
#define HO_UNDO_WATCH_NS 3000000000ULL  /* the notifier's UNDO_WATCH_S */

#define SCHEME_IE 1
#define SCHEME_BWA 2

#define PATH_OPEN 1                 /* restarted here from Open/Disorder/Recovery */
#define PATH_LOSS 2                 /* already in Loss: restarted by the notifier's ICMP */
#define PATH_NONE 3                 /* signal seen on an ACK outside Loss: no restart */
#define PATH_TIMER 4                /* in Loss, the timer fired again before any restart */

#define PHASE_IDLE 0
#define PHASE_RTT 1                 /* restarted: waiting for the first ACK */
#define PHASE_ACK2 2
#define PHASE_ACK3 3

extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

struct ho_signal {
	__u64 gen;       /* hand-offs so far (0: none) */
	__u64 t_ns;      /* CLOCK_MONOTONIC of the latest: the notifier writes it when it
			  * signals, then once more with the time its first ICMP went out */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ho_signal);
} ho_signal SEC(".maps");

struct ho_key {                     /* network byte order, as on the wire */
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
};

struct ho_sock {
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 mss;       /* tp->mss_cache */
	__u32 hdr_len;   /* tp->tcp_header_len: TCP header with options */
	__u32 packets_out;
	__u32 ca_state;
	__u64 t_ns;      /* when this was written */
	__u32 undone_gen; /* the hand-off whose restart Linux undid (0: none; see ho_undo_cwnd) */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ho_key);
	__type(value, struct ho_sock);
} ho_socks SEC(".maps");

struct ho_rec {
	__u64 seq;       /* 1, 2, ... (0: never written) */
	__u64 gen;
	__u64 t_signal_ns;
	__u64 t_restart_ns;
	__u64 t_done_ns; /* reno_bwa: when ssthresh was set (0: not yet) */
	__u64 t_seen_ns; /* when the program acted on the signal (an ACK or a state change) */
	struct ho_key key;
	__u32 scheme;    /* SCHEME_* */
	__u32 path;      /* PATH_* */
	__u32 ca_state;  /* the state the restart found */
	__u32 cwnd_before;
	__u32 ssthresh_before;
	__u32 mss;       /* at the restart (reno_bwa: when the estimate was made) */
	__u32 rtt_us;    /* reno_bwa: restart -> first ACK */
	__u32 lag_us;    /* reno_bwa: 2nd -> 3rd ACK */
	__u32 acked;     /* reno_bwa: bytes the pair's second ACK acknowledged */
	__u32 ssthresh;  /* the ssthresh set (reno_ie: at the restart) */
	__u32 una_seen;  /* snd_una before the ACK that met the signal (reno_bwa's start) */
	__u32 undone;    /* times Linux undid this restart's loss marks (ho_undo_cwnd) */
	__u32 cwnd_redo; /* the cwnd Linux had when the second ICMP put the socket back in
			  * Loss, before ho_redo set it back (0: no second restart) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HO_LOG_SLOTS);
	__type(key, __u32);
	__type(value, struct ho_rec);
} ho_log SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ho_log_seq SEC(".maps");

/* Per-socket private area (inside icsk_ca_priv: at most 104 bytes). */
struct ho_priv {
	__u64 gen_seen;  /* the signal generation this socket has acted on */
	__u64 t_restart_ns;
	__u64 t_ack_ns;  /* reno_bwa: the 2nd ACK's time */
	__u64 rec_seq;   /* this hand-off's log record */
	__u32 phase;     /* PHASE_* */
	__u32 rtt_us;
	__u32 una;       /* reno_bwa: snd_una the estimate last saw */
	__u32 nxt;       /* reno_bwa: snd_nxt when the pair's first ACK came */
	__u32 last_una;  /* snd_una after the previous ACK */
	__u32 restarted; /* 1 from a restart until the socket is back in Open */
	__u32 undone_gen; /* the hand-off whose restart Linux undid (published in ho_socks) */
	__u32 ss_set;    /* the ssthresh the hand-off left (restart, then reno_bwa's estimate) */
	__u32 cwnd_undone; /* the cwnd kept when Linux undid the restart (ho_undone) */
	__u32 redone_gen;  /* the hand-off whose second restart ho_redo has made */
};

static __always_inline bool before(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq1 - seq2) < 0;
}

static __always_inline bool after(__u32 seq1, __u32 seq2)
{
	return before(seq2, seq1);
}

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct ho_priv *priv_of(const struct sock *sk)
{
	return (struct ho_priv *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline struct ho_signal *signal_now(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&ho_signal, &zero);
}

static __always_inline void key_of(const struct sock *sk, struct ho_key *k)
{
	k->saddr = sk->__sk_common.skc_rcv_saddr;
	k->daddr = sk->__sk_common.skc_daddr;
	k->sport = bpf_htons(sk->__sk_common.skc_num);
	k->dport = sk->__sk_common.skc_dport;
}

static __always_inline void publish(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ho_key k = {};
	struct ho_sock v = {};

	key_of(sk, &k);
	v.snd_una = tp->snd_una;
	v.snd_nxt = tp->snd_nxt;
	v.mss = tp->mss_cache;
	v.hdr_len = tp->tcp_header_len;
	v.packets_out = tp->packets_out;
	v.ca_state = ((struct inet_connection_sock *)sk)->icsk_ca_state;
	v.t_ns = bpf_ktime_get_ns();
	v.undone_gen = priv_of(sk)->undone_gen;
	bpf_map_update_elem(&ho_socks, &k, &v, BPF_ANY);
}

static __always_inline struct ho_rec *log_slot(__u64 seq)
{
	__u32 idx = (__u32)((seq - 1) & (HO_LOG_SLOTS - 1));
	struct ho_rec *r = bpf_map_lookup_elem(&ho_log, &idx);

	return (r && r->seq == seq) ? r : NULL;
}

/* A new hand-off record for sk; returns its sequence number (0: no room). */
static __always_inline __u64 log_restart(struct sock *sk, struct ho_signal *sig,
					 __u32 scheme, __u32 path, __u32 ssthresh)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 zero = 0, idx;
	__u64 *seqp = bpf_map_lookup_elem(&ho_log_seq, &zero);
	struct ho_rec *r;
	__u64 seq;

	if (!seqp)
		return 0;
	seq = __sync_fetch_and_add(seqp, 1) + 1;
	idx = (__u32)((seq - 1) & (HO_LOG_SLOTS - 1));
	r = bpf_map_lookup_elem(&ho_log, &idx);
	if (!r)
		return 0;
	__builtin_memset(r, 0, sizeof(*r));
	r->seq = seq;
	r->gen = sig->gen;
	r->t_signal_ns = sig->t_ns;
	r->t_restart_ns = priv_of(sk)->t_restart_ns;
	r->t_seen_ns = bpf_ktime_get_ns();
	r->una_seen = tp->snd_una;
	key_of(sk, &r->key);
	r->scheme = scheme;
	r->path = path;
	r->ca_state = ((struct inet_connection_sock *)sk)->icsk_ca_state;
	r->cwnd_before = tp->snd_cwnd;
	r->ssthresh_before = tp->snd_ssthresh;
	r->mss = tp->mss_cache;
	r->ssthresh = ssthresh;
	return seq;
}

static __always_inline void ho_init(struct sock *sk)
{
	struct ho_priv *p = priv_of(sk);
	struct ho_signal *sig = signal_now();

	__builtin_memset(p, 0, sizeof(*p));
	p->gen_seen = sig ? sig->gen : 0;
	p->last_una = tcp_sk(sk)->snd_una;
	publish(sk);
}

static __always_inline void ho_release(struct sock *sk)
{
	struct ho_key k = {};

	key_of(sk, &k);
	bpf_map_delete_elem(&ho_socks, &k);
}

/*
 * The restart: called when a hand-off signal this socket has not acted on meets either
 * the socket entering Loss (path PATH_OPEN: set cwnd 1 and the timer's ssthresh here) or
 * an ACK while already in Loss (PATH_LOSS: the timer did that already).
 */
static __always_inline void ho_restart(struct sock *sk, struct ho_signal *sig, __u32 scheme,
				       __u32 path, __u64 t_restart)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ho_priv *p = priv_of(sk);
	__u32 ssthresh = tp->snd_ssthresh;

	p->gen_seen = sig->gen;
	p->t_restart_ns = t_restart;
	p->rtt_us = 0;
	p->t_ack_ns = 0;
	p->una = tp->snd_una;
	p->restarted = path != PATH_NONE;
	if (path == PATH_OPEN) {
		ssthresh = tp->snd_cwnd >> 1;
		if (ssthresh < 2)
			ssthresh = 2;
	}
	p->rec_seq = log_restart(sk, sig, scheme, path, ssthresh);
	p->ss_set = ssthresh;
	if (path == PATH_OPEN) {
		tp->snd_ssthresh = ssthresh;
		tp->snd_cwnd = 1;
		tp->snd_cwnd_cnt = 0;
	}
	p->phase = (scheme == SCHEME_BWA && path != PATH_NONE) ? PHASE_RTT : PHASE_IDLE;
}

/*
 * Linux undid this socket's restart and unmarked the segments lost in the outage (see
 * ho_undo_cwnd): say so in ho_socks at once, for the notifier to restart it once more.
 */
static __always_inline void ho_undone(struct sock *sk)
{
	struct ho_priv *p = priv_of(sk);
	struct ho_rec *r;

	if (p->undone_gen == (__u32)p->gen_seen)
		return;
	p->undone_gen = (__u32)p->gen_seen;
	p->cwnd_undone = tcp_sk(sk)->snd_cwnd;
	r = log_slot(p->rec_seq);
	if (r)
		r->undone += 1;
	publish(sk);
}

/*
 * The second restart ICMP (the notifier's answer to ho_undone) puts the socket back in
 * Loss and retransmits at once.  Linux does not touch the window there, and since the
 * undo it may have grown far beyond the restart's: the undo unmarked the segments lost in
 * the outage, they count as in flight again, and an ACK with SACK blocks puts the socket
 * in Recovery, where proportional rate reduction sets cwnd to what is in flight.  The
 * ICMP then marks them lost again and the sender would send that whole window at once
 * (a CI run of 2026-11-29: cwnd 47, about 40 segments in one burst into a 384 kbit/s
 * link).  So the window goes back to where the undo left it, and ssthresh to the one the
 * hand-off set, once per hand-off.
 */
static __always_inline void ho_redo(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ho_priv *p = priv_of(sk);
	struct ho_rec *r;

	/* the notifier watches for an undo for HO_UNDO_WATCH_NS after the hand-off; a later
	 * entry into Loss is Linux's own */
	if (!p->undone_gen || p->undone_gen != (__u32)p->gen_seen ||
	    p->redone_gen == p->undone_gen ||
	    bpf_ktime_get_ns() - p->t_restart_ns > HO_UNDO_WATCH_NS)
		return;
	p->redone_gen = p->undone_gen;
	r = log_slot(p->rec_seq);
	if (r)
		r->cwnd_redo = tp->snd_cwnd;
	if (tp->snd_cwnd > p->cwnd_undone)
		tp->snd_cwnd = p->cwnd_undone ? p->cwnd_undone : 1;
	tp->snd_cwnd_cnt = 0;
	if (p->ss_set)
		tp->snd_ssthresh = p->ss_set;
}

static __always_inline void ho_set_state(struct sock *sk, __u8 new_state, __u32 scheme)
{
	struct ho_signal *sig;
	struct tcp_sock *tp = tcp_sk(sk);

	/* back in Open before everything sent before the restart is acknowledged: an undo
	 * (a recovery that ends normally has snd_una at or past high_seq).  The window's
	 * undo (ho_undo_cwnd) is only asked when Linux kept the ssthresh to undo to. */
	if (new_state == TCP_CA_Open && priv_of(sk)->restarted &&
	    before(tp->snd_una, tp->high_seq)) {
		/* the undo has just put back the ssthresh from before the outage where that
		 * was larger (tcp_undo_cwnd_reduction); the paper's sender keeps the one the
		 * hand-off set */
		if (priv_of(sk)->ss_set)
			tp->snd_ssthresh = priv_of(sk)->ss_set;
		ho_undone(sk);
	}
	if (new_state == TCP_CA_Open)
		priv_of(sk)->restarted = 0;
	if (new_state != TCP_CA_Loss)
		return;
	sig = signal_now();
	/* from Open, Disorder or Recovery with no new hand-off signalled: the second ICMP
	 * of this one */
	if (((struct inet_connection_sock *)sk)->icsk_ca_state != TCP_CA_Loss &&
	    !(sig && sig->gen != priv_of(sk)->gen_seen))
		ho_redo(sk);
	if (sig && sig->gen != priv_of(sk)->gen_seen)
		ho_restart(sk, sig, scheme,
			   ((struct inet_connection_sock *)sk)->icsk_ca_state == TCP_CA_Loss ?
			   PATH_TIMER : PATH_OPEN, bpf_ktime_get_ns());
}

/*
 * reno_bwa: the packet-pair estimate.  RTT: from the restart to the first ACK that
 * acknowledges new data.  Then the first two "pair" ACKs after it: each acknowledges
 * between half a segment and two segments (one packet, or two with delayed ACKs).
 * Others do not measure a packet's spacing and are skipped -- the ACK of a
 * retransmission that fills a hole acknowledges everything the receiver held beyond it,
 * and the restart leaves the head segment split in two (its tail is 8 bytes long) --
 * and an ACK of that kind between the two breaks the pair (the next pair ACK starts it
 * again), as does a second ACK half an RTT or more after the first, or one that
 * acknowledges data sent after the first ACK came (the two segments were not in the
 * bottleneck's queue together).  lag = time between the pair; acked = bytes the second
 * acknowledged; then
 * ssthresh = max(2, acked x RTT / (lag x MSS)) segments, i.e. BW x RTT / packet size
 * with BW = acked / lag.
 */
static __always_inline void bwa_ack(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ho_priv *p = priv_of(sk);
	__u64 now, ss;
	__u32 lag, acked, mss = tp->mss_cache ? tp->mss_cache : 1;
	bool pair;
	struct ho_rec *r;

	if (p->phase == PHASE_IDLE || !before(p->una, tp->snd_una))
		return;
	acked = tp->snd_una - p->una;
	p->una = tp->snd_una;
	now = bpf_ktime_get_ns();
	if (p->phase == PHASE_RTT) {
		p->rtt_us = (__u32)((now - p->t_restart_ns) / 1000);
		if (p->rtt_us == 0)
			p->rtt_us = 1;
		p->phase = PHASE_ACK2;
		return;
	}
	pair = 2 * acked > mss && acked <= 2 * mss;
	if (!pair) {
		p->phase = PHASE_ACK2;
		return;
	}
	if (p->phase == PHASE_ACK2) {
		p->t_ack_ns = now;
		p->nxt = tp->snd_nxt;
		p->phase = PHASE_ACK3;
		return;
	}
	lag = (__u32)((now - p->t_ack_ns) / 1000);
	if (lag == 0 || 2 * lag > p->rtt_us || after(tp->snd_una, p->nxt)) {
		/* together: no spacing to read; half an RTT or more apart, or this ACK
		 * acknowledges data sent after the first one came (loss recovery may send a
		 * lone segment first; the next flight is an RTT later): not one burst's
		 * spacing at the bottleneck -- this one starts the pair */
		p->t_ack_ns = now;
		p->nxt = tp->snd_nxt;
		return;
	}
	ss = (__u64)acked * p->rtt_us / ((__u64)lag * mss);
	if (ss < 2)
		ss = 2;
	if (ss > HO_SSTHRESH_MAX)
		ss = HO_SSTHRESH_MAX;
	tp->snd_ssthresh = (__u32)ss;
	p->ss_set = (__u32)ss;
	p->phase = PHASE_IDLE;
	r = log_slot(p->rec_seq);
	if (r) {
		r->rtt_us = p->rtt_us;
		r->lag_us = lag;
		r->acked = acked;
		r->mss = mss;
		r->ssthresh = (__u32)ss;
		r->t_done_ns = now;
	}
}

static __always_inline void ho_in_ack(struct sock *sk, __u32 scheme)
{
	struct ho_signal *sig = signal_now();
	__u8 state = ((struct inet_connection_sock *)sk)->icsk_ca_state;

	struct ho_priv *p = priv_of(sk);
	struct ho_rec *r;

	if (sig && sig->gen != p->gen_seen) {
		ho_restart(sk, sig, scheme, state == TCP_CA_Loss ? PATH_LOSS : PATH_NONE,
			   sig->t_ns);
		/* this ACK already moved snd_una: it is the restart's first ACK */
		p->una = p->last_una;
		r = log_slot(p->rec_seq);
		if (r)
			r->una_seen = p->una;
	}
	if (scheme == SCHEME_BWA)
		bwa_ack(sk);
	p->last_una = tcp_sk(sk)->snd_una;
	publish(sk);
}

/*
 * Undo (Linux found the losses spurious: timestamps, D-SACK, F-RTO) would put back the
 * window from before the outage; after a hand-over restart the schemes keep growing from
 * the restart instead, as the paper's sender does.  Otherwise as NewReno.
 *
 * Linux has by then also unmarked every segment it had marked lost.  That happens after a
 * restart in Loss (the timer fired during the outage): the ACKs of the outage were lost,
 * so the restarted segment is one the receiver had, and its ACK echoes a timestamp from
 * before the outage (Eifel detection).  The segments really lost in the outage then count
 * as in flight, above the restart's small window, and the sender would send nothing until
 * a probe or its timer.  So the socket says so in ho_socks (`undone_gen`), at once, and
 * the notifier sends it the restart ICMP a second time: from Open, that marks the
 * segments lost again, clears the undo marker and retransmits (handover/notifier.py).
 */
static __always_inline __u32 ho_undo_cwnd(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (!priv_of(sk)->restarted)
		return tcp_reno_undo_cwnd(sk);
	/* only an undo in Loss with data sent before the restart still unacknowledged
	 * unmarks segments that matter; an undo at the normal end of recovery, or in
	 * Recovery, leaves nothing stalled (the window's undo is refused either way) */
	if (((struct inet_connection_sock *)sk)->icsk_ca_state == TCP_CA_Loss &&
	    before(tp->snd_una, tp->high_seq))
		ho_undone(sk);
	return tp->snd_cwnd;
}

#define HANDOVER_CC(NAME, SCHEME)                                                       \
SEC("struct_ops/" #NAME "_init")                                                        \
void BPF_PROG(NAME##_init, struct sock *sk) { ho_init(sk); }                            \
SEC("struct_ops/" #NAME "_release")                                                     \
void BPF_PROG(NAME##_release, struct sock *sk) { ho_release(sk); }                      \
SEC("struct_ops/" #NAME "_cong_avoid")                                                  \
void BPF_PROG(NAME##_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)               \
{ tcp_reno_cong_avoid(sk, ack, acked); }                                                \
SEC("struct_ops/" #NAME "_ssthresh")                                                    \
__u32 BPF_PROG(NAME##_ssthresh, struct sock *sk) { return tcp_reno_ssthresh(sk); }      \
SEC("struct_ops/" #NAME "_undo_cwnd")                                                   \
__u32 BPF_PROG(NAME##_undo_cwnd, struct sock *sk) { return ho_undo_cwnd(sk); }          \
SEC("struct_ops/" #NAME "_set_state")                                                   \
void BPF_PROG(NAME##_set_state, struct sock *sk, __u8 new_state)                        \
{ ho_set_state(sk, new_state, SCHEME); }                                                \
SEC("struct_ops/" #NAME "_in_ack_event")                                                \
void BPF_PROG(NAME##_in_ack_event, struct sock *sk, __u32 flags)                        \
{ ho_in_ack(sk, SCHEME); }                                                              \
SEC(".struct_ops")                                                                      \
struct tcp_congestion_ops NAME = {                                                      \
	.init = (void *)NAME##_init,                                                    \
	.release = (void *)NAME##_release,                                              \
	.cong_avoid = (void *)NAME##_cong_avoid,                                        \
	.ssthresh = (void *)NAME##_ssthresh,                                            \
	.undo_cwnd = (void *)NAME##_undo_cwnd,                                          \
	.set_state = (void *)NAME##_set_state,                                          \
	.in_ack_event = (void *)NAME##_in_ack_event,                                    \
	.flags = TCP_CONG_NON_RESTRICTED,                                               \
	.name = #NAME,                                                                  \
}

#endif
