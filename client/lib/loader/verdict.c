/* The verdict (verdict.h): which stage limits the loader over the last window, with the
 * figures and the change that would help. The rules, in order, are those of docs/diagnosis.md. */
#include "verdict.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *dsc__verdict_bytes(uint64_t bytes, char *buf, size_t cap) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0 || v >= 100 || v == floor(v))
        snprintf(buf, cap, "%.0f %s", v, units[u]);
    else
        snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

/* Rounds up to a whole MiB (suggested sizes read better). */
static uint64_t round_mib(uint64_t bytes) {
    uint64_t mib = 1u << 20;
    return (bytes + mib - 1) / mib * mib;
}

static void set(dsc_verdict_t *out, int bottleneck) {
    out->bottleneck = bottleneck;
}

__attribute__((format(printf, 3, 4))) static void text(char *dst, size_t cap, const char *fmt,
                                                       ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
}

static double share(double part, double whole) {
    return whole > 0 ? part / whole : 0;
}

/* Seconds per byte of server i over the window; a server that kept an I/O thread waiting and
 * sent nothing counts as infinitely slow. -1 when it was not used. */
static double server_spb(const dsc_verdict_server_t *s) {
    if (s->bytes > 0)
        return s->recv_seconds / (double)s->bytes;
    return s->recv_seconds > 0.05 ? INFINITY : -1;
}

static int slow_server(const dsc_verdict_input_t *in, double fetch_stall, dsc_verdict_t *out) {
    if (in->server_count < 2 || in->servers == NULL)
        return 0;
    double spb[256];
    uint32_t used = 0, worst = UINT32_MAX;
    for (uint32_t i = 0; i < in->server_count && i < 256; i++) {
        spb[i] = server_spb(&in->servers[i]);
        if (spb[i] < 0)
            continue;
        used++;
        if (worst == UINT32_MAX || spb[i] > spb[worst])
            worst = i;
    }
    if (used < 2)
        return 0;
    /* Median of the others. */
    double others[256];
    uint32_t n = 0;
    for (uint32_t i = 0; i < in->server_count && i < 256; i++)
        if (i != worst && spb[i] >= 0)
            others[n++] = spb[i];
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = i; j > 0 && others[j - 1] > others[j]; j--) {
            double t = others[j];
            others[j] = others[j - 1];
            others[j - 1] = t;
        }
    double median = n % 2 ? others[n / 2] : (others[n / 2 - 1] + others[n / 2]) / 2;
    if (!(median > 0))
        return 0;
    double ratio = spb[worst] / median;
    double blamed = share(in->servers[worst].stall_seconds, fetch_stall);
    if (ratio < DSC_VERDICT_SLOW_RATIO || blamed < 0.3)
        return 0;
    const char *addr = in->server_addrs ? in->server_addrs[worst] : "?";
    set(out, DSC_BOTTLENECK_SERVER);
    snprintf(out->server, sizeof out->server, "%s", addr);
    double ms_worst = spb[worst] * (1 << 20) * 1e3, ms_med = median * (1 << 20) * 1e3;
    if (isinf(ratio))
        text(out->evidence, sizeof out->evidence,
             "stall %.1f%%; %.0f%% of it waits on chunks at %s, which sent nothing in %.1f s "
             "while the others answer in %.1f ms per MiB",
             100 * out->stall_fraction, 100 * blamed, addr, in->servers[worst].recv_seconds,
             ms_med);
    else
        text(out->evidence, sizeof out->evidence,
             "stall %.1f%%; %.0f%% of it waits on chunks at %s; it answers in %.1f ms per MiB, "
             "the others in %.1f ms (median)",
             100 * out->stall_fraction, 100 * blamed, addr, ms_worst, ms_med);
    if (isinf(ratio) || ratio >= 100)
        text(out->suggestion, sizeof out->suggestion,
             "server %s answers far slower than the others (or not at all): check its load, disk "
             "and link, or take it out of the member list (with replicas >= 2 the others serve its "
             "shards)",
             addr);
    else
        text(out->suggestion, sizeof out->suggestion,
             "server %s answers %.1fx slower than the others: check its load, disk and link, or "
             "take it out of the member list (with replicas >= 2 the others serve its shards)",
             addr, ratio);
    return 1;
}

/* The servers' backing storage is the limit: the stall waits on chunks (fetch side: half or more
 * of what next() waited on, waited), a share of the GETs missed the servers' RAM (GETs answered
 * from read-ahead count: the server read them from the store), and the store was busy all the
 * window (a backing read always in flight, or reads waiting for --backing-rate). Zero stall needs
 * the store to deliver what it delivered divided by (1 - stall): the loader would then run that
 * much faster. */
static int storage(const dsc_verdict_input_t *in, double fetch_stall, double waited,
                   dsc_verdict_t *out) {
    double span = 0, busy = 0, wait = 0, bytes = 0, lat_us = 0;
    uint64_t hits = 0, misses = 0, capacity = 0, rate = 0, pool = 0;
    uint32_t with = 0;
    for (uint32_t i = 0; in->servers != NULL && i < in->server_count; i++) {
        const dsc_verdict_server_t *s = &in->servers[i];
        if (!s->have_backing || !(s->backing_at > 0))
            continue;
        with++;
        /* Rates per server summed: each over its own span between two answers. */
        bytes += (double)s->backing_bytes / s->backing_at;
        busy += s->backing_busy_s / s->backing_at;
        wait += s->backing_wait_s / s->backing_at;
        span += s->backing_at;
        hits += s->srv_hits;
        misses += s->srv_misses;
        capacity += s->store_capacity;
        rate += s->backing_rate;
        pool += s->backing_pool;
        lat_us += s->backing_latency_us;
    }
    if (with == 0 || hits + misses == 0)
        return 0;
    double miss = (double)misses / (double)(hits + misses);
    double stall = out->stall_fraction;
    int throttled = wait >= 0.5 * with;
    if (fetch_stall < 0.5 * waited || miss < DSC_VERDICT_MISS_SHARE ||
        (busy < DSC_VERDICT_STORE_BUSY * with && !throttled) || stall >= 0.999)
        return 0;
    double need = bytes / (1 - stall);
    double window = in->window_seconds > 0 ? in->window_seconds : 1e-9;
    double demand = (double)in->delta.wire_bytes / window / (1 - stall);
    set(out, DSC_BOTTLENECK_STORAGE);
    text(out->evidence, sizeof out->evidence,
         "stall %.1f%%; %.0f%% of the GETs missed the servers' RAM and were read from storage: "
         "it delivered %.1f MB/s (%.1f ms per read, %.1f reads in flight of %llu), zero stall "
         "needs %.1f MB/s of %.1f MB/s demanded (%u server%s)",
         100 * stall, 100 * miss, bytes / 1e6, lat_us / with / 1e3, busy, (unsigned long long)pool,
         need / 1e6, demand / 1e6, with, with == 1 ? "" : "s");
    /* RAM that would lower the misses to what the store delivers now: the cached share must
     * rise from 1 - miss to 1 - miss * (1 - stall), the dataset being capacity / (1 - miss). */
    double ram = miss < 1 ? (double)capacity / (1 - miss) * (1 - miss * (1 - stall)) : 0;
    char have[32], want[32];
    dsc__verdict_bytes(capacity, have, sizeof have);
    dsc__verdict_bytes(round_mib((uint64_t)ram), want, sizeof want);
    if (throttled)
        text(out->suggestion, sizeof out->suggestion,
             "--backing-rate holds the servers to %.1f MB/s: raise it to %.1f MB/s if the store "
             "can give that, or give the servers %s of RAM (now %s)",
             (double)rate / 1e6, need / 1e6, want, have);
    else if (busy >= 0.8 * (double)pool)
        text(out->suggestion, sizeof out->suggestion,
             "every backing reader is busy: zero stall needs %.1f MB/s from storage; if it has "
             "that bandwidth raise --backing-reads from %llu to %llu, else give the servers %s of "
             "RAM (now %s)",
             need / 1e6, (unsigned long long)pool / with, (unsigned long long)pool / with * 2, want,
             have);
    else
        text(out->suggestion, sizeof out->suggestion,
             "storage is the limit: backing bandwidth of %.1f MB/s (now %.1f), or %s of RAM "
             "across the servers (now %s) so that fewer GETs miss",
             need / 1e6, bytes / 1e6, want, have);
    (void)span;
    return 1;
}

/* The decode threads are what next() waits on: `decode` or `collate`, whichever the threads
 * spend more time on (a decoded step may wait for its collation only because the threads are
 * decoding other chunks). Image decoding (Loader(decode=...), image.c) runs inside collation but
 * is decode work: it counts for decode, and says so. short_of_cores: the rules found the threads
 * neither busy nor most of the stall, yet next() waited on them more than on fetches: received
 * chunks wait for a core, not for more threads, and the suggestion says so. */
static void cpu_stage(const dsc_verdict_input_t *in, double cpu_side, double worker_util,
                      int short_of_cores, dsc_verdict_t *out) {
    const dsc_verdict_counters_t *d = &in->delta;
    uint32_t threads = in->decode_threads ? in->decode_threads : 1;
    double window = in->window_seconds > 0 ? in->window_seconds : 1e-9;
    double image = d->image_seconds, copy = d->collate_seconds - image;
    int decode = d->decode_seconds + image >= copy;
    int images = image > d->decode_seconds && decode;
    char images_text[48] = "";
    if (image > 0)
        snprintf(images_text, sizeof images_text, ", %.2f s of it image decoding", image);
    set(out, decode ? DSC_BOTTLENECK_DECODE : DSC_BOTTLENECK_COLLATE);
    text(out->evidence, sizeof out->evidence,
         "stall %.1f%%; %.0f%% of it waits on the decode threads, which spend most of their "
         "time on %s: busy %.0f%% (%u thread%s: %.2f s decode + %.2f s collate%s in %.1f "
         "s)%s",
         100 * out->stall_fraction, 100 * share(cpu_side, d->stall_seconds),
         images   ? "image decoding"
         : decode ? "checksum + decompression"
                  : "collation",
         100 * worker_util, threads, threads == 1 ? "" : "s", d->decode_seconds, d->collate_seconds,
         images_text, window, in->assist ? "" : "; next() does not help (no_assist)");
    if (short_of_cores) {
        text(out->suggestion, sizeof out->suggestion,
             "the decode threads were busy only %.0f%% of the time: received chunks wait for a "
             "core, not for a thread; leave the loader's threads cores of their own (fewer "
             "other threads or processes on them); raising decode_threads helps only where "
             "cores are free",
             100 * worker_util);
        return;
    }
    uint32_t more = threads * 2;
    text(out->suggestion, sizeof out->suggestion, "raise decode_threads from %u to %u%s%s%s",
         threads, more, decode ? "" : " (collation runs on the decode threads)",
         images ? ", or store the images smaller (dscache ingest images --encoded --max-side "
                  "N) so that each decodes faster"
                : "",
         in->assist ? "" : ", and leave no_assist at 0 so that next() works while it waits");
}

/* The stall is next()'s own time, not a wait on any stage (waited: the seconds it waited on
 * one, under 1% of the steps): nothing to change in the loader's stages or options. */
static void own_time(const dsc_verdict_counters_t *d, double waited, double busy,
                     dsc_verdict_t *out) {
    set(out, DSC_BOTTLENECK_NONE);
    double per_call = d->batches > 0 ? (d->stall_seconds - waited) / (double)d->batches : 0;
    text(out->evidence, sizeof out->evidence,
         "stall %.2f%% (%.3f s of %.1f s of steps), of which %.2f%% waiting on a stage (chunks "
         "not yet received or decoded); the rest is next()'s own time, %.2f ms per batch (the "
         "loader's lock, the hand-out)",
         100 * out->stall_fraction, d->stall_seconds, busy, 100 * share(waited, busy),
         1e3 * per_call);
    text(out->suggestion, sizeof out->suggestion,
         "nothing to change in the loader's stages: they keep ahead of the trainer; next()'s "
         "own time falls with larger batches or with cores free for the loader's threads");
}

/* next() waits most on steps not planned yet (the scheduler plans an epoch when next() reaches
 * it): no fetch, decode or collation limits the job, and no rule names the plan. Not too_few: the
 * steps were measured. */
static void unplanned(const dsc_verdict_counters_t *d, double unreceived, dsc_verdict_t *out) {
    set(out, DSC_BOTTLENECK_UNKNOWN);
    text(out->evidence, sizeof out->evidence,
         "stall %.1f%%; %.0f%% of it waits on steps not yet planned, %.0f%% on chunks not yet "
         "received, %.0f%% on the decode threads: no fetch or decode stage is the limit",
         100 * out->stall_fraction, 100 * share(d->wait[DSC_WAIT_PLAN], d->stall_seconds),
         100 * share(unreceived, d->stall_seconds),
         100 * share(d->wait[DSC_WAIT_DECODE] + d->wait[DSC_WAIT_COLLATE], d->stall_seconds));
    text(out->suggestion, sizeof out->suggestion,
         "the steps are planned slower than they are used (each epoch is planned when next() "
         "reaches it): larger batches, so that fewer steps are planned per epoch");
}

/* Fills *out (the window less the start-up) and returns the start-up's seconds left out:
 * the wait for the loader's first batch says what a cold start costs (connections, the first
 * chunks, all of them misses), not what limits the job once it runs. */
static double leave_out_startup(const dsc_verdict_input_t *in, dsc_verdict_counters_t *out) {
    *out = in->delta;
    double startup = in->startup_stall;
    if (!(startup > 0))
        return 0;
    if (startup > out->stall_seconds)
        startup = out->stall_seconds;
    out->stall_seconds -= startup;
    for (int i = 0; i < DSC_WAIT_COUNT; i++) {
        double w = in->startup_wait[i] > 0 ? in->startup_wait[i] : 0;
        out->wait[i] = out->wait[i] > w ? out->wait[i] - w : 0;
    }
    return startup;
}

void dsc__verdict_compute(const dsc_verdict_input_t *in, dsc_verdict_t *out) {
    memset(out, 0, sizeof *out);
    dsc_verdict_counters_t steady;
    double startup = leave_out_startup(in, &steady);
    const dsc_verdict_counters_t *d = &steady;
    dsc_verdict_input_t rules = *in; /* what the rules below read: the window less the start-up */
    rules.delta = steady;
    in = &rules;
    double busy = d->stall_seconds + d->compute_seconds;
    double window = in->window_seconds > 0 ? in->window_seconds : 1e-9;
    out->stall_fraction = share(d->stall_seconds, busy);
    double sps = (double)d->samples / window;
    if (startup > 0 && busy < DSC_VERDICT_MIN_BUSY) {
        set(out, DSC_BOTTLENECK_UNKNOWN);
        text(out->evidence, sizeof out->evidence,
             "start-up: %.2f s waiting for the first batch, then %.2f s of stall + compute (at "
             "least %.1f s needed)",
             startup, busy, DSC_VERDICT_MIN_BUSY);
        text(out->suggestion, sizeof out->suggestion, "wait for a few steps");
        out->too_few = 1;
        return;
    }
    if (busy < DSC_VERDICT_MIN_BUSY) {
        set(out, DSC_BOTTLENECK_UNKNOWN);
        out->too_few = 1;
        text(out->evidence, sizeof out->evidence,
             "%.2f s of stall + compute measured so far (at least %.1f s needed)", busy,
             DSC_VERDICT_MIN_BUSY);
        text(out->suggestion, sizeof out->suggestion, "wait for a few steps");
        return;
    }
    if (out->stall_fraction < DSC_VERDICT_STALL_MIN) {
        set(out, DSC_BOTTLENECK_NONE);
        if (startup > 0 &&
            share(startup + d->stall_seconds, busy + startup) >= DSC_VERDICT_STALL_MIN)
            /* A limit named here would be a false alarm: a short run whose start-up (every
             * chunk a miss, read from storage) makes the window's stall. */
            text(out->evidence, sizeof out->evidence,
                 "stall %.2f%% (%.3f s of %.1f s of steps) after the first batch, which waited "
                 "%.2f s (start-up: %.1f%% of the window with it); %.0f samples/s",
                 100 * out->stall_fraction, d->stall_seconds, busy, startup,
                 100 * share(startup + d->stall_seconds, busy + startup), sps);
        else
            text(out->evidence, sizeof out->evidence,
                 "stall %.2f%% (%.3f s of %.1f s of steps); %.0f samples/s",
                 100 * out->stall_fraction, d->stall_seconds, busy, sps);
        text(out->suggestion, sizeof out->suggestion,
             "nothing to change: the trainer is the limit, the loader keeps ahead of it");
        return;
    }
    const double *w = d->wait;
    double fetch_side =
        w[DSC_WAIT_PLAN] + w[DSC_WAIT_QUEUED] + w[DSC_WAIT_BUDGET] + w[DSC_WAIT_NETWORK];
    double unreceived = fetch_side - w[DSC_WAIT_PLAN]; /* chunks queued, or sent, not received */
    double cpu_side = w[DSC_WAIT_DECODE] + w[DSC_WAIT_COLLATE];
    double waited = fetch_side + cpu_side; /* the rest of the stall is next()'s own time */
    uint32_t threads = in->decode_threads ? in->decode_threads : 1;
    double worker_util = (d->decode_seconds + d->collate_seconds) / (window * threads);
    double sf = 100 * out->stall_fraction;

    /* Host-to-device copies busy most of the time. */
    double h2d_util = d->h2d_seconds / window;
    if (in->device >= 0 && h2d_util >= 0.7) {
        set(out, DSC_BOTTLENECK_H2D);
        text(out->evidence, sizeof out->evidence,
             "stall %.1f%%; copies to the device busy %.0f%% of the time (%.1f s in %.1f s)", sf,
             100 * h2d_util, d->h2d_seconds, window);
        text(out->suggestion, sizeof out->suggestion,
             "send fewer bytes to the device: store a narrower dtype (u8 or f16 instead of f32) "
             "and convert on the GPU, or give the GPU a PCIe link of its own");
        return;
    }

    /* Chunks fetched twice per epoch (the shuffle windows do not fit in cache_bytes): whatever
     * stage then runs short, the extra fetching and decoding is the cause. */
    double refetch_share = share((double)d->refetches, (double)d->chunks_fetched);
    if (d->refetches >= 4 && refetch_share >= DSC_VERDICT_REFETCH_SHARE) {
        char have[32], need[32];
        set(out, DSC_BOTTLENECK_CACHE);
        text(out->evidence, sizeof out->evidence,
             "stall %.1f%%; %.0f%% of the chunks received were refetches (%llu of %llu): their "
             "shuffle window's chunks did not fit in cache_bytes",
             sf, 100 * refetch_share, (unsigned long long)d->refetches,
             (unsigned long long)d->chunks_fetched);
        dsc__verdict_bytes(in->cache_bytes, have, sizeof have);
        if (in->cache_need > 0) {
            dsc__verdict_bytes(round_mib(in->cache_need), need, sizeof need);
            char lower[96] = "";
            if (in->shuffle_window > 0 && in->window_fit > 0)
                snprintf(lower, sizeof lower, " or set shuffle_window to %llu",
                         (unsigned long long)in->window_fit);
            double held = (double)in->cache_bytes / (double)in->cache_need;
            text(out->suggestion, sizeof out->suggestion,
                 "cache_bytes %s holds %.*f of two shuffle windows: raise it to %s%s", have,
                 held < 0.1 ? 2 : 1, held, need, lower);
        } else {
            text(out->suggestion, sizeof out->suggestion,
                 "raise cache_bytes from %s, or lower shuffle_window", have);
        }
        return;
    }

    /* next() waited on a stage for under 1% of the time: the rest of its stall is its own
     * (taking the loader's lock, handing the batch out), which no stage or option explains. */
    if (share(waited, busy) < DSC_VERDICT_STALL_MIN) {
        own_time(d, waited, busy, out);
        return;
    }

    /* The decode threads (checksum + lz4, then collation) cannot keep up. */
    /* (Waiting on decode while the threads idle means the chunk came late: a fetch matter,
     * unless those waits make most of the stall: the threads are then short of cores.) */
    double capacity = threads + (in->assist ? share(d->stall_seconds, window) : 0);
    double cpu_util = (d->decode_seconds + d->collate_seconds) / (window * capacity);
    if ((cpu_side > fetch_side && (cpu_util >= 0.5 || cpu_side >= 0.6 * d->stall_seconds)) ||
        (worker_util >= 0.9 && cpu_side > 0.25 * fetch_side)) {
        cpu_stage(in, cpu_side, worker_util, 0, out);
        return;
    }

    /* Misses read from the servers' backing storage. */
    if (storage(in, fetch_side, waited, out))
        return;

    /* One server much slower than the others. */
    if (slow_server(in, fetch_side, out))
        return;

    double recv = 0, header_wait = 0;
    uint64_t responses = 0;
    for (uint32_t i = 0; in->servers != NULL && i < in->server_count; i++) {
        recv += in->servers[i].recv_seconds;
        header_wait += in->servers[i].wait_seconds;
        responses += in->servers[i].responses;
    }
    double wire_mbs = (double)d->wire_bytes / window / 1e6;
    /* Chunks waiting to be sent (budget full, or the I/O threads each waiting out a round trip)
     * while the wire idles between answers: latency, not bandwidth. More in flight helps. */
    double unsent_share = share(w[DSC_WAIT_BUDGET] + w[DSC_WAIT_QUEUED], fetch_side);
    double wait_share = share(header_wait, recv);
    char cur[32], more[32];
    if (unsent_share >= 0.4 && wait_share >= 0.5) {
        set(out, DSC_BOTTLENECK_INFLIGHT);
        uint64_t budget = in->inflight_bytes;
        text(out->evidence, sizeof out->evidence,
             "stall %.1f%%; %.0f%% of the fetch stall waits on chunks not sent yet (%.0f%% with "
             "the in-flight budget full) while the I/O threads spend %.0f%% of their time "
             "waiting for answers to start: %.1f MB/s",
             sf, 100 * unsent_share, 100 * share(w[DSC_WAIT_BUDGET], fetch_side), 100 * wait_share,
             wire_mbs);
        dsc__verdict_bytes(budget, cur, sizeof cur);
        dsc__verdict_bytes(budget * 2, more, sizeof more);
        uint32_t conns = in->connections ? in->connections : 1;
        if (w[DSC_WAIT_QUEUED] > w[DSC_WAIT_BUDGET])
            text(out->suggestion, sizeof out->suggestion,
                 "raise inflight_bytes from %s to %s and connections from %u to %u: more "
                 "requests in flight cover the round trip",
                 cur, more, conns, conns * 2);
        else if (in->server_inflight_bytes > 0 && in->server_inflight_bytes < budget) {
            char scur[32], smore[32];
            dsc__verdict_bytes(in->server_inflight_bytes, scur, sizeof scur);
            dsc__verdict_bytes(in->server_inflight_bytes * 2, smore, sizeof smore);
            text(out->suggestion, sizeof out->suggestion,
                 "raise inflight_bytes from %s to %s (and server_inflight_bytes from %s to %s): "
                 "more bytes in flight cover the round trip",
                 cur, more, scur, smore);
        } else {
            text(out->suggestion, sizeof out->suggestion,
                 "raise inflight_bytes from %s to %s: more bytes in flight cover the round trip",
                 cur, more);
        }
        return;
    }
    /* Fetch only when fetches (chunks not yet received) are what next() waits on most; else the
     * decode threads are (though the rule above found them neither busy nor most of the stall),
     * or the plan is. */
    if (cpu_side > unreceived && cpu_side >= w[DSC_WAIT_PLAN]) {
        cpu_stage(in, cpu_side, worker_util, 1, out);
        return;
    }
    if (w[DSC_WAIT_PLAN] > unreceived) {
        unplanned(d, unreceived, out);
        return;
    }
    set(out, DSC_BOTTLENECK_FETCH);
    text(out->evidence, sizeof out->evidence,
         "stall %.1f%%; %.0f%% of it waits on chunks not yet received; the servers deliver "
         "%.1f MB/s in %llu answers, streaming %.0f%% of the I/O time",
         sf, 100 * share(unreceived, d->stall_seconds), wire_mbs, (unsigned long long)responses,
         100 * (1 - wait_share));
    text(out->suggestion, sizeof out->suggestion,
         "the network or the servers are the limit: a faster link, more servers (placement "
         "spreads the shards), or fewer bytes on the wire (ingest with lz4)");
}
