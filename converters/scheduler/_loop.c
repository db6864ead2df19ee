/* The scheduler's event loop in C: engine.Engine.run's rules.

   engine.py's Python loop is the specification; this file follows it step for step (release,
   issue, a run of compute nodes set at once, a collective's instance, a send meeting its
   receive) so that every start, end and cause is the same to the nanosecond, and
   tests/test_scheduler_c.py holds the two together.
   What needs Python (groups, the network's costs, channel keys) is worked out by
   Engine._talk_tables before the loop: rows of (group or channel, issuers needed, cost,
   traffic class, bytes), and the row of each communication node (collectives alike share one:
   distinct() below numbers them). Anything out of the ordinary returns None and the Python
   loop runs instead: a rank that cannot finish (the deadlock report is Python's), a time that
   would not fit 62 bits, a table of an unexpected type.

   run(ranks, count, stride, groups, channels, times=True)
       -> (starts, ends, cause, computing, talking, traffic), or None
   ranks: an iterable of `count` tuples, one per rank position, as Engine._native_inputs yields
   them; groups, channels: the dicts it numbers them in. Per rank position: the three per-node
   lists; when its compute stream was busy (as engine.py's `computing`); and for summary.py,
   when its communication ran (merged) and per traffic class (count, bytes, busy ns). With
   times false, True instead of the tuple: every rank finished, which is all a dry run asks.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_spans.h"

enum { T_COMPUTE, T_COLL, T_SEND, T_RECV, T_OTHER };
enum { Q_COMPUTE, Q_COMM, Q_FREE };
enum { S_WAITING, S_READY, S_ISSUED, S_DONE };
#define NO_CAUSE (-1)
#define NO_DEPENDENT (-1)
#define SEVERAL (-2)
#define TIME_LIMIT ((int64_t)1 << 62)

/* ------------------------------------------------------------------ growable int64 vector */

typedef struct {
    int64_t *v;
    Py_ssize_t len, cap, head; /* head: first unread item when used as a queue */
} Vec;

static int vec_push(Vec *a, int64_t x) {
    if (a->len == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 8;
        int64_t *v = PyMem_Realloc(a->v, (size_t)cap * sizeof(int64_t));
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->len++] = x;
    return 0;
}

/* A min-heap of ints (a rank's ready priorities), as heapq keeps one. */
static int heap_push(Vec *h, int64_t x) {
    if (vec_push(h, x) < 0) return -1;
    Py_ssize_t i = h->len - 1;
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (h->v[up] <= x) break;
        h->v[i] = h->v[up];
        i = up;
    }
    h->v[i] = x;
    return 0;
}

static int64_t heap_pop(Vec *h) {
    int64_t top = h->v[0], x = h->v[--h->len];
    Py_ssize_t i = 0, n = h->len;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h->v[c + 1] < h->v[c]) c++;
        if (h->v[c] >= x) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n) h->v[i] = x;
    return top;
}

/* ------------------------------------------------------------------ int64 -> int64 map

   Keys are >= 0 (-1 marks a free slot): a rank's count of collectives issued per group (key
   rank * groups + group), the bucket of an end time, a converted list (its address). Open
   addressing with linear probing; the home slot is the top bits of key * 2**64/phi (Fibonacci
   hashing: times that are multiples of 1000 spread as well as any). */

typedef struct {
    int64_t *keys, *values;
    Py_ssize_t used, cap;
    int shift; /* 64 - log2(cap) */
} Map;

static inline Py_ssize_t map_home(const Map *m, int64_t key) {
    return (Py_ssize_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> m->shift);
}

static int map_grow(Map *m) {
    Py_ssize_t cap = m->cap ? m->cap * 2 : 64;
    int64_t *keys = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    int64_t *values = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    if (!keys || !values) {
        PyMem_Free(keys);
        PyMem_Free(values);
        return -1;
    }
    Map bigger = {keys, values, m->used, cap, m->cap ? m->shift - 1 : 58};
    for (Py_ssize_t j = 0; j < cap; j++) keys[j] = -1;
    for (Py_ssize_t j = 0; j < m->cap; j++) {
        if (m->keys[j] < 0) continue;
        Py_ssize_t s = map_home(&bigger, m->keys[j]);
        while (keys[s] >= 0) s = (s + 1) & (cap - 1);
        keys[s] = m->keys[j];
        values[s] = m->values[j];
    }
    PyMem_Free(m->keys);
    PyMem_Free(m->values);
    *m = bigger;
    return 0;
}

/* The value of `key`, made 0 when it is new; NULL when out of memory. */
static int64_t *map_slot(Map *m, int64_t key) {
    if (2 * (m->used + 1) > m->cap && map_grow(m) < 0) return NULL;
    Py_ssize_t s = map_home(m, key);
    while (m->keys[s] >= 0 && m->keys[s] != key) s = (s + 1) & (m->cap - 1);
    if (m->keys[s] < 0) {
        m->keys[s] = key;
        m->values[s] = 0;
        m->used++;
    }
    return &m->values[s];
}

/* Remove `key` and give its value (-1 when absent). The entries after it that may move back
   toward their home slot do, so that no probe meets a hole before its key. */
static int64_t map_take(Map *m, int64_t key) {
    if (!m->cap) return -1;
    Py_ssize_t mask = m->cap - 1, hole = map_home(m, key);
    while (m->keys[hole] != key) {
        if (m->keys[hole] < 0) return -1;
        hole = (hole + 1) & mask;
    }
    int64_t value = m->values[hole];
    for (Py_ssize_t j = (hole + 1) & mask; m->keys[j] >= 0; j = (j + 1) & mask) {
        Py_ssize_t home = map_home(m, m->keys[j]);
        if (((j - home) & mask) >= ((j - hole) & mask)) { /* the hole lies between its home and it */
            m->keys[hole] = m->keys[j];
            m->values[hole] = m->values[j];
            hole = j;
        }
    }
    m->keys[hole] = -1;
    m->used--;
    return value;
}

/* ------------------------------------------------------------------ the loop's state */

/* What the loop keeps of a node, together: the loop reads and writes most of it each time it
   meets the node, and one cache line holds it (with a dozen separate arrays a node cost a cache
   miss per array once the ranks outgrew the caches: a fifth more time at 4096 ranks). */
typedef struct {
    int64_t start, end, cause;
    int64_t dur, cost, next; /* next: engine.Program.next_of */
    int32_t rem;             /* dependencies not yet ended */
    int32_t aux, need;       /* group or channel; issuers needed */
    uint8_t state, type, queue;
} Slot;

typedef struct {
    Py_ssize_t n;
    Slot *node;
    const int64_t *prio, *by_prio; /* shared (Loop.arrays); NULL: ascending ids */
    PyObject **more;               /* borrowed lists where next is SEVERAL */
    const int64_t *ndeps;          /* shared: each node's dependencies (engine.Program.ndeps) */
    const int64_t *order;          /* shared: compute nodes in issue order (Program.compute_order) */
    Py_ssize_t norder, first;      /* compute nodes; place in order of the first not started */
    int64_t *talk, *klass, *bytes; /* communication nodes' positions, traffic classes, sizes */
    Py_ssize_t ntalk, nklass;
    Vec q[3];
    int busy[2];
    int64_t last[2];
    Py_ssize_t done;
    Vec computing; /* start, end, start, end, ... */
} Rank;

typedef struct {
    int64_t needed, cost, cause, k;
    Vec entries; /* r, i, r, i, ... in issue order */
} Instance;

typedef struct {
    Rank *ranks;
    Py_ssize_t nranks, ngroups, nchannels;
    int64_t max_group, max_channel; /* the largest numbers the ranks use */
    int timeline;                   /* make the per-node lists (else a dry run) */
    int64_t stride;
    /* Ends to come, as engine.py keeps them: a heap of distinct times, and per time a bucket
       of the nodes that end then (rank, node, ...) in the order they were set. */
    Vec times;
    Map when; /* time -> 1 + its bucket */
    Vec *buckets;
    Py_ssize_t nbuckets;
    Vec free_buckets;
    Map counts;
    Vec *pending;  /* per group: indices into insts of its instances waiting for issuers */
    Instance *insts;
    Py_ssize_t ninsts, cap_insts;
    Vec free_insts;
    Vec *sends, *recvs; /* per channel: (sent, arrived, r, i) and (r, i, posted) waiting */
    Map converted;      /* a list's address -> 1 + its place in arrays */
    Vec arrays;         /* the int64 arrays converted from lists, as addresses */
} Loop;

static Py_ssize_t new_bucket(Loop *L) {
    if (L->free_buckets.len) return (Py_ssize_t)L->free_buckets.v[--L->free_buckets.len];
    Vec *v = PyMem_Realloc(L->buckets, (size_t)(L->nbuckets + 1) * sizeof(Vec));
    if (!v) return -1;
    memset(&v[L->nbuckets], 0, sizeof(Vec));
    L->buckets = v;
    return L->nbuckets++;
}

/* Node i of rank position r ends at `end` (>= 0: times never go below 0). */
static int push_end(Loop *L, int64_t end, Py_ssize_t r, Py_ssize_t i) {
    int64_t *slot = map_slot(&L->when, end);
    if (!slot) return -1;
    if (!*slot) {
        Py_ssize_t b = new_bucket(L);
        if (b < 0 || heap_push(&L->times, end) < 0) return -1;
        *slot = b + 1;
    }
    Vec *bucket = &L->buckets[*slot - 1];
    return vec_push(bucket, r) < 0 || vec_push(bucket, i) < 0 ? -1 : 0;
}

static int finish_recv(Loop *L, Py_ssize_t r, Py_ssize_t i, int64_t posted, int64_t sent, int64_t arrived,
                       int64_t sr, int64_t si) {
    Rank *R = &L->ranks[r];
    R->node[i].start = sent > posted ? sent : posted;
    int64_t end = R->node[i].end = arrived > posted ? arrived : posted;
    if (arrived >= posted) R->node[i].cause = sr * L->stride + si;
    return push_end(L, end, r, i);
}

static Py_ssize_t new_instance(Loop *L) {
    if (L->free_insts.len) return (Py_ssize_t)L->free_insts.v[--L->free_insts.len];
    if (L->ninsts == L->cap_insts) {
        Py_ssize_t cap = L->cap_insts ? L->cap_insts * 2 : 16;
        Instance *v = PyMem_Realloc(L->insts, (size_t)cap * sizeof(Instance));
        if (!v) return -1;
        memset(v + L->cap_insts, 0, (size_t)(cap - L->cap_insts) * sizeof(Instance));
        L->insts = v;
        L->cap_insts = cap;
    }
    return L->ninsts++;
}

static int issue_collective(Loop *L, Py_ssize_t r, Py_ssize_t i, int64_t t) {
    Rank *R = &L->ranks[r];
    int64_t g = R->node[i].aux, needed = R->node[i].need, cost = R->node[i].cost;
    if (needed <= 1) { /* the only issuer: starts now, keeps its own cause */
        R->node[i].start = t;
        int64_t end = R->node[i].end = cost > 0 ? t + cost : t;
        return push_end(L, end, r, i);
    }
    int64_t *count = map_slot(&L->counts, (int64_t)r * L->ngroups + g);
    if (!count) return -1;
    int64_t k = (*count)++;
    Vec *pending = &L->pending[g];
    Py_ssize_t at = -1, slot;
    for (slot = 0; slot < pending->len; slot++) {
        if (L->insts[pending->v[slot]].k == k) {
            at = (Py_ssize_t)pending->v[slot];
            break;
        }
    }
    if (at < 0) {
        at = new_instance(L);
        if (at < 0 || vec_push(pending, at) < 0) return -1;
        Instance *fresh = &L->insts[at];
        fresh->needed = needed;
        fresh->cost = 0;
        fresh->cause = NO_CAUSE;
        fresh->k = k;
        fresh->entries.len = 0;
    }
    Instance *inst = &L->insts[at];
    if (vec_push(&inst->entries, r) < 0 || vec_push(&inst->entries, i) < 0) return -1;
    if (cost > inst->cost) inst->cost = cost;
    inst->cause = R->node[i].cause; /* the last member to issue decides the start */
    if (inst->entries.len / 2 < inst->needed) return 0;
    for (slot = 0; slot < pending->len && pending->v[slot] != at; slot++) {
    }
    memmove(pending->v + slot, pending->v + slot + 1, (size_t)(pending->len - slot - 1) * sizeof(int64_t));
    pending->len--;
    if (vec_push(&L->free_insts, at) < 0) return -1;
    inst = &L->insts[at];
    int64_t end = t + inst->cost;
    for (Py_ssize_t e = 0; e < inst->entries.len; e += 2) {
        Py_ssize_t r2 = (Py_ssize_t)inst->entries.v[e], i2 = (Py_ssize_t)inst->entries.v[e + 1];
        Rank *R2 = &L->ranks[r2];
        R2->node[i2].start = t;
        R2->node[i2].end = end;
        R2->node[i2].cause = inst->cause;
        if (push_end(L, end, r2, i2) < 0) return -1;
    }
    return 0;
}

static int issue_send(Loop *L, Py_ssize_t r, Py_ssize_t i, int64_t t) {
    Rank *R = &L->ranks[r];
    R->node[i].start = t;
    int64_t end = R->node[i].end = t + R->node[i].cost;
    if (push_end(L, end, r, i) < 0) return -1;
    Vec *recvs = &L->recvs[R->node[i].aux];
    if (recvs->head < recvs->len) {
        int64_t *w = recvs->v + recvs->head;
        recvs->head += 3;
        if (recvs->head == recvs->len) recvs->head = recvs->len = 0;
        return finish_recv(L, (Py_ssize_t)w[0], (Py_ssize_t)w[1], w[2], t, end, r, i);
    }
    Vec *sends = &L->sends[R->node[i].aux];
    if (vec_push(sends, t) < 0 || vec_push(sends, end) < 0 || vec_push(sends, r) < 0 || vec_push(sends, i) < 0)
        return -1;
    return 0;
}

static int post_recv(Loop *L, Py_ssize_t r, Py_ssize_t i, int64_t t) {
    Rank *R = &L->ranks[r];
    Vec *sends = &L->sends[R->node[i].aux];
    if (sends->head < sends->len) {
        int64_t *w = sends->v + sends->head;
        sends->head += 4;
        if (sends->head == sends->len) sends->head = sends->len = 0;
        return finish_recv(L, r, i, t, w[0], w[1], w[2], w[3]);
    }
    Vec *recvs = &L->recvs[R->node[i].aux];
    if (vec_push(recvs, r) < 0 || vec_push(recvs, i) < 0 || vec_push(recvs, t) < 0) return -1;
    return 0;
}

static inline Py_ssize_t node_of(const Rank *R, int64_t prio) {
    return (Py_ssize_t)(R->by_prio ? R->by_prio[prio] : prio);
}

/* A queued node's cause is the node of its rank that readied it; if that did not end just now,
   the node that freed the stream made it wait and is its cause instead. */
static inline void take_stream_cause(Loop *L, Py_ssize_t r, Rank *R, Py_ssize_t i, int64_t t, int stream) {
    int64_t freed_by = R->last[stream];
    if (freed_by == NO_CAUSE) return;
    int64_t readied_by = R->node[i].cause;
    int64_t readied_at = readied_by >= 0 ? R->node[readied_by - (int64_t)r * L->stride].end : 0;
    if (readied_at != t) R->node[i].cause = freed_by;
}

/* Compute node i, at place c of its rank's issue order of compute nodes ahead of every other
   not started, starts a run (engine.py's run_compute, Program.run_from): the nodes after it
   that each only its predecessor readies are started one after another from *end, without an
   event each. The last one, whose end *end becomes, is returned for the one event kept. */
static Py_ssize_t run_compute(Loop *L, Py_ssize_t r, Rank *R, Py_ssize_t c, Py_ssize_t i, int64_t *end) {
    const int64_t *order = R->order;
    Py_ssize_t last = c;
    /* the next place continues the run: its node is the only dependent of this one, and this
       its only dependency (Program.links) */
    while (last + 1 < R->norder && R->node[order[last]].next == order[last + 1] && R->ndeps[order[last + 1]] == 1)
        last++;
    if (last > c) { /* the run's last node may not ready a node of several dependencies */
        Py_ssize_t j = (Py_ssize_t)order[last];
        int64_t k = R->node[j].next;
        int several = k >= 0 && R->ndeps[k] > 1;
        if (k == SEVERAL) {
            PyObject *more = R->more[j];
            for (Py_ssize_t m = 0; m < PyList_GET_SIZE(more) && !several; m++)
                several = R->ndeps[PyLong_AsSsize_t(PyList_GET_ITEM(more, m))] > 1;
        }
        if (several) last--;
    }
    /* nor end when it starts: node by node, its end would come in a later batch of that time */
    while (last > c && !R->node[order[last]].dur) last--;
    int64_t base = (int64_t)r * L->stride, t = *end;
    for (Py_ssize_t place = c + 1; place <= last; place++) {
        Py_ssize_t j = (Py_ssize_t)order[place];
        R->node[i].state = S_DONE;
        R->node[j].state = S_ISSUED;
        R->node[j].start = t;
        R->node[j].cause = base + i;
        t = R->node[j].end = t + R->node[j].dur;
        i = j;
    }
    R->done += last - c;
    Py_ssize_t place = last + 1; /* (places further on that were ready earlier have started) */
    while (place < R->norder && R->node[order[place]].state >= S_ISSUED) place++;
    R->first = place;
    *end = t;
    return i;
}

static int issue(Loop *L, Py_ssize_t r, int64_t t) {
    Rank *R = &L->ranks[r];
    Vec *free_q = &R->q[Q_FREE];
    while (free_q->len) {
        Py_ssize_t i = node_of(R, heap_pop(free_q));
        R->node[i].state = S_ISSUED;
        R->node[i].start = t;
        if (R->node[i].type == T_RECV) {
            if (post_recv(L, r, i, t) < 0) return -1;
        } else {
            int64_t end = R->node[i].end = t + R->node[i].dur;
            if (push_end(L, end, r, i) < 0) return -1;
        }
    }
    if (R->q[Q_COMPUTE].len && !R->busy[Q_COMPUTE]) {
        R->busy[Q_COMPUTE] = 1;
        Py_ssize_t i = node_of(R, heap_pop(&R->q[Q_COMPUTE]));
        R->node[i].state = S_ISSUED;
        R->node[i].start = t;
        take_stream_cause(L, r, R, i, t, Q_COMPUTE);
        int64_t end = R->node[i].end = t + R->node[i].dur;
        if (R->first < R->norder && R->order[R->first] == i) i = run_compute(L, r, R, R->first, i, &end);
        if (end > t) { /* the stream's busy time, touching stretches joined */
            Vec *c = &R->computing;
            if (c->len && c->v[c->len - 1] == t) {
                c->v[c->len - 1] = end;
            } else if (vec_push(c, t) < 0 || vec_push(c, end) < 0) {
                return -1;
            }
        }
        if (push_end(L, end, r, i) < 0) return -1;
    }
    if (R->q[Q_COMM].len && !R->busy[Q_COMM]) {
        R->busy[Q_COMM] = 1;
        Py_ssize_t i = node_of(R, heap_pop(&R->q[Q_COMM]));
        R->node[i].state = S_ISSUED;
        take_stream_cause(L, r, R, i, t, Q_COMM);
        if (R->node[i].type == T_COLL) return issue_collective(L, r, i, t);
        return issue_send(L, r, i, t);
    }
    return 0;
}

static int ready(Rank *R, Py_ssize_t d, int64_t enc) {
    if (--R->node[d].rem) return 0;
    R->node[d].state = S_READY;
    R->node[d].cause = enc;
    return heap_push(&R->q[R->node[d].queue], R->by_prio ? R->prio[d] : (int64_t)d);
}

/* Node i of rank position r ends: free its stream, ready its dependents. */
static int release(Loop *L, Py_ssize_t r, Py_ssize_t i) {
    Rank *R = &L->ranks[r];
    R->node[i].state = S_DONE;
    R->done++;
    int64_t enc = (int64_t)r * L->stride + i;
    int q = R->node[i].queue;
    if (q != Q_FREE) {
        R->busy[q] = 0;
        R->last[q] = enc;
    }
    int64_t d = R->node[i].next;
    if (d == NO_DEPENDENT) return 0;
    if (d >= 0) return ready(R, (Py_ssize_t)d, enc);
    PyObject *more = R->more[i];
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(more); k++) {
        if (ready(R, (Py_ssize_t)PyLong_AsSsize_t(PyList_GET_ITEM(more, k)), enc) < 0) return -1;
    }
    return 0;
}

static int ascending(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The ranks to issue after a time's ends, ascending: mostly the two members of a collective,
   which an insertion sort orders faster than qsort is called. */
static void sort_positions(Vec *dirty) {
    if (dirty->len > 16) {
        qsort(dirty->v, (size_t)dirty->len, sizeof(int64_t), ascending);
        return;
    }
    for (Py_ssize_t k = 1; k < dirty->len; k++) {
        int64_t x = dirty->v[k];
        Py_ssize_t j = k;
        for (; j > 0 && dirty->v[j - 1] > x; j--) dirty->v[j] = dirty->v[j - 1];
        dirty->v[j] = x;
    }
}

static int run_loop(Loop *L) {
    Py_ssize_t nranks = L->nranks;
    Vec dirty = {0};
    uint8_t *dirty_flag = PyMem_Calloc((size_t)nranks + 1, 1);
    int rc = -1;
    if (!dirty_flag) goto out;
    for (Py_ssize_t r = 0; r < nranks; r++)
        if (issue(L, r, 0) < 0) goto out;
    while (L->times.len) {
        /* Every node ending at t is released before any rank issues at t; ranks then issue in
           position order. What ends at t meanwhile goes in a new bucket, for a later round. */
        int64_t t = heap_pop(&L->times);
        Py_ssize_t b = (Py_ssize_t)map_take(&L->when, t) - 1;
        Vec *batch = &L->buckets[b];
        if (batch->len == 2) {
            Py_ssize_t r = (Py_ssize_t)batch->v[0];
            if (release(L, r, (Py_ssize_t)batch->v[1]) < 0 || issue(L, r, t) < 0) goto out;
        } else {
            dirty.len = 0;
            for (Py_ssize_t k = 0; k < batch->len; k += 2) { /* (releasing adds no end) */
                Py_ssize_t r = (Py_ssize_t)batch->v[k];
                if (release(L, r, (Py_ssize_t)batch->v[k + 1]) < 0) goto out;
                if (!dirty_flag[r]) {
                    dirty_flag[r] = 1;
                    if (vec_push(&dirty, r) < 0) goto out;
                }
            }
            sort_positions(&dirty);
            for (Py_ssize_t k = 0; k < dirty.len; k++) {
                dirty_flag[dirty.v[k]] = 0;
                if (issue(L, (Py_ssize_t)dirty.v[k], t) < 0) goto out;
            }
        }
        L->buckets[b].len = 0; /* (issuing may have moved the buckets) */
        if (vec_push(&L->free_buckets, b) < 0) goto out;
    }
    rc = 0;
out:
    PyMem_Free(dirty.v);
    PyMem_Free(dirty_flag);
    if (rc < 0 && !PyErr_Occurred()) PyErr_NoMemory();
    return rc;
}

/* ------------------------------------------------------------------ Python tables in, lists out */

/* A list of ints as int64s, each within [lo, hi); NULL and *bad set when one is not (the
   Python loop then runs), NULL alone when out of memory. */
static int64_t *int64s(PyObject *list, Py_ssize_t n, int64_t lo, int64_t hi, int *bad) {
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != n) {
        *bad = 1;
        return NULL;
    }
    int64_t *v = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!v) return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *x = PyList_GET_ITEM(list, k);
        int overflow = 0;
        long long value = PyLong_Check(x) ? PyLong_AsLongLongAndOverflow(x, &overflow) : 0;
        if (!PyLong_Check(x) || overflow || value < lo || value >= hi) {
            *bad = 1;
            PyMem_Free(v);
            return NULL;
        }
        v[k] = value;
    }
    return v;
}

/* Ranks of one structure share their tables' lists, and ranks of one role their whole program:
   each list is converted once (by identity and `field`, which stands for the bounds checked)
   and the arrays shared. */
static int64_t *shared_int64s(Loop *L, PyObject *list, int field, Py_ssize_t n, int64_t lo, int64_t hi, int *bad) {
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != n) {
        *bad = 1;
        return NULL;
    }
    /* (objects are 8-byte aligned: the low bits are free for the field) */
    int64_t *slot = map_slot(&L->converted, (int64_t)(intptr_t)list | field);
    if (!slot) return NULL;
    if (*slot) return (int64_t *)(intptr_t)L->arrays.v[*slot - 1];
    int64_t *v = int64s(list, n, lo, hi, bad);
    if (!v) return NULL;
    if (vec_push(&L->arrays, (int64_t)(intptr_t)v) < 0) {
        PyMem_Free(v);
        return NULL;
    }
    *slot = L->arrays.len;
    return v;
}

static void free_rank(Rank *R) {
    PyMem_Free(R->node);
    PyMem_Free(R->more);
    PyMem_Free(R->talk);
    PyMem_Free(R->klass);
    PyMem_Free(R->bytes);
    for (int k = 0; k < 3; k++) PyMem_Free(R->q[k].v);
    PyMem_Free(R->computing.v);
    memset(R, 0, sizeof *R); /* (freed again at the end: nothing left) */
}

/* x as a position below n, or -1 when it is no int in [0, n). */
static Py_ssize_t position(PyObject *x, Py_ssize_t n) {
    Py_ssize_t i = PyLong_Check(x) ? PyLong_AsSsize_t(x) : -1;
    if (i < 0 || i >= n) {
        PyErr_Clear();
        return -1;
    }
    return i;
}

/* The dependents of nodes with several (engine.Program.more), checked to be positions. */
static int load_more(Rank *R, PyObject *more, int *bad) {
    Py_ssize_t n = R->n, pos = 0, found = 0, several = 0;
    PyObject *key, *list;
    for (Py_ssize_t i = 0; i < n; i++) several += R->node[i].next == -2;
    if (several) {
        R->more = PyMem_Calloc((size_t)n, sizeof(PyObject *));
        if (!R->more) return -1;
    }
    while (PyDict_Next(more, &pos, &key, &list)) {
        Py_ssize_t j = position(key, n);
        if (j < 0 || R->node[j].next != -2 || !PyList_Check(list)) {
            *bad = 1;
            return 0;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(list); k++) {
            if (position(PyList_GET_ITEM(list, k), n) < 0) {
                *bad = 1;
                return 0;
            }
        }
        R->more[j] = list; /* (borrowed: the Program that owns the dict outlives the loop) */
        found++;
    }
    if (found != several) *bad = 1;
    return 0;
}

/* A communication node's (group or channel, issuers needed, cost, traffic class, bytes) is one
   of `rows`, shared by the nodes alike: `talk` lists the nodes' positions, `index` their rows.
   The first three go into the node's slot; its traffic class (summary.py sums the busy time of
   each, -1 for a receive) and bytes stay beside `talk`. */
static int load_talk(Loop *L, Rank *R, PyObject *talk, PyObject *index, PyObject *rows, int *bad, int64_t *total) {
    Py_ssize_t n = R->n, count = PyList_Check(talk) ? PyList_GET_SIZE(talk) : -1;
    Py_ssize_t nrows = PyList_Check(rows) ? PyList_GET_SIZE(rows) : -1;
    int64_t *at = NULL, *which = NULL, *row = NULL;
    int rc = -1;
    if (count < 0 || nrows < 0) {
        *bad = 1;
        return 0;
    }
    enum { AUX, NEED, COST, KLASS, BYTES, FIELDS };
    static const int64_t lo[FIELDS] = {0, 0, -TIME_LIMIT, -1, 0};
    const int64_t hi[FIELDS] = {INT32_MAX, INT32_MAX, TIME_LIMIT, nrows, TIME_LIMIT};
    row = PyMem_Malloc((size_t)(nrows ? nrows : 1) * FIELDS * sizeof(int64_t));
    if (!row) goto out;
    for (Py_ssize_t u = 0; u < nrows && !*bad; u++) {
        PyObject *fields = PyList_GET_ITEM(rows, u);
        if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != FIELDS) {
            *bad = 1;
            break;
        }
        for (int f = 0; f < FIELDS; f++) {
            PyObject *x = PyTuple_GET_ITEM(fields, f);
            int overflow = 0;
            long long value = PyLong_Check(x) ? PyLong_AsLongLongAndOverflow(x, &overflow) : 0;
            if (!PyLong_Check(x) || overflow || value < lo[f] || value >= hi[f]) *bad = 1;
            row[u * FIELDS + f] = value;
        }
    }
    if (*bad || !(at = int64s(talk, count, 0, n, bad)) || !(which = int64s(index, count, 0, nrows, bad)) ||
        !(R->klass = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(int64_t))) ||
        !(R->bytes = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(int64_t)))) {
        rc = *bad ? 0 : -1;
        goto out;
    }
    for (Py_ssize_t j = 0; j < count; j++) {
        Py_ssize_t i = (Py_ssize_t)at[j];
        const int64_t *fields = &row[which[j] * FIELDS];
        int64_t cost = fields[COST];
        int t = R->node[i].type;
        if (t != T_COLL && t != T_SEND && t != T_RECV) *bad = 1;
        if (t == T_SEND && cost < 0) *bad = 1; /* (an end before its start: times must not go below 0) */
        int64_t *most = t == T_COLL ? &L->max_group : &L->max_channel; /* (checked once all are read) */
        if (fields[AUX] > *most) *most = fields[AUX];
        /* The loop only ever adds a duration or cost to a time that is a sum of others: below
           2**62 in all, no int64 overflows. */
        if (cost > 0 && cost >= TIME_LIMIT - *total) *bad = 1;
        if (*bad) break;
        if (cost > 0) *total += cost;
        R->node[i].aux = (int32_t)fields[AUX];
        R->node[i].need = (int32_t)fields[NEED];
        R->node[i].cost = cost;
        R->klass[j] = fields[KLASS];
        R->bytes[j] = fields[BYTES];
        if (fields[KLASS] >= R->nklass) R->nklass = fields[KLASS] + 1;
    }
    if (L->timeline) { /* (for the summary; a dry run makes none) */
        R->talk = at;
        R->ntalk = count;
        at = NULL;
    } else {
        PyMem_Free(R->klass);
        PyMem_Free(R->bytes);
        R->klass = R->bytes = NULL;
    }
    rc = 0;
out:
    if (rc < 0 && !PyErr_Occurred()) PyErr_NoMemory();
    PyMem_Free(at);
    PyMem_Free(which);
    PyMem_Free(row);
    return rc;
}

/* (types, queue, durations, ndeps, next_of, more, prio, by_prio, compute_order, roots, talk, index, rows) */
static int load_rank(Loop *L, Rank *R, PyObject *spec, int *bad, int64_t *total) {
    PyObject *types, *queue, *dur, *ndeps, *next_of, *more, *prio, *by_prio, *order, *roots, *talk, *index, *rows;
    if (!PyArg_ParseTuple(spec, "SSOOOO!OOOOOOO", &types, &queue, &dur, &ndeps, &next_of, &PyDict_Type, &more,
                          &prio, &by_prio, &order, &roots, &talk, &index, &rows))
        return -1;
    Py_ssize_t n = R->n = PyBytes_GET_SIZE(types);
    R->norder = PyList_Check(order) ? PyList_GET_SIZE(order) : -1;
    if (PyBytes_GET_SIZE(queue) != n || !PyList_Check(roots) || n >= L->stride || R->norder < 0) {
        *bad = 1;
        return 0;
    }
    /* Lists shared by ranks of one structure (or one role) are converted once (field 0: a
       count or a time, 1: a position or -1, -2, 2: a position). */
    const int64_t *durations = shared_int64s(L, dur, 0, n, 0, TIME_LIMIT, bad);
    const int64_t *nexts = durations ? shared_int64s(L, next_of, 1, n, -2, n, bad) : NULL;
    const int64_t *counts = nexts ? shared_int64s(L, ndeps, 0, n, 0, INT32_MAX, bad) : NULL;
    if (!counts) return *bad ? 0 : -1;
    R->ndeps = counts;
    if (!(R->order = shared_int64s(L, order, 2, R->norder, 0, n, bad))) return *bad ? 0 : -1;
    if (prio != Py_None) {
        if (!(R->prio = shared_int64s(L, prio, 2, n, 0, n, bad))) return *bad ? 0 : -1;
        if (!(R->by_prio = shared_int64s(L, by_prio, 2, n, 0, n, bad))) return *bad ? 0 : -1;
    }
    const uint8_t *kinds = (const uint8_t *)PyBytes_AS_STRING(types);
    const uint8_t *queues = (const uint8_t *)PyBytes_AS_STRING(queue);
    R->node = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Slot));
    if (!R->node) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Slot *node = &R->node[i];
        if (kinds[i] > T_OTHER || queues[i] > Q_FREE || durations[i] >= TIME_LIMIT - *total) {
            *bad = 1;
            return 0;
        }
        *total += durations[i];
        node->cause = NO_CAUSE;
        node->dur = durations[i];
        node->next = nexts[i];
        node->rem = (int32_t)counts[i];
        node->type = kinds[i];
        node->queue = queues[i];
    }
    R->last[0] = R->last[1] = NO_CAUSE;
    if (load_more(R, more, bad) < 0 || *bad) return *bad ? 0 : -1;
    if (load_talk(L, R, talk, index, rows, bad, total) < 0 || *bad) return *bad ? 0 : -1;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(roots); k++) {
        Py_ssize_t i = position(PyList_GET_ITEM(roots, k), n);
        if (i < 0) {
            *bad = 1;
            return 0;
        }
        R->node[i].state = S_READY;
        if (heap_push(&R->q[R->node[i].queue], R->prio ? R->prio[i] : (int64_t)i) < 0) return -1;
    }
    return 0;
}

static PyObject *list_of(const int64_t *v, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *x = PyLong_FromLongLong(v[k]);
        if (!x) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, x);
    }
    return list;
}

/* One int64 field of every node (offsetof(Slot, ...)) as a list. */
static PyObject *field_of(const Rank *R, size_t offset) {
    PyObject *list = PyList_New(R->n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < R->n; i++) {
        int64_t value;
        memcpy(&value, (const char *)&R->node[i] + offset, sizeof value);
        PyObject *x = PyLong_FromLongLong(value);
        if (!x) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, x);
    }
    return list;
}

static PyObject *stretches_of(const Vec *c) {
    PyObject *list = PyList_New(c->len / 2);
    if (!list) return NULL;
    for (Py_ssize_t k = 0; k < c->len; k += 2) {
        PyObject *pair = Py_BuildValue("[LL]", (long long)c->v[k], (long long)c->v[k + 1]);
        if (!pair) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k / 2, pair);
    }
    return list;
}

/* (start, end) pairs sorted by start, then end. The pairs come in the order of the talk list,
   the collectives' places then the sends' and receives': each part runs in order on one
   stream, so mostly two ascending runs, which are merged; anything else goes to qsort. */
static int sort_pairs(int64_t *pairs, Py_ssize_t count) {
    Py_ssize_t cut = 0; /* where the second run starts */
    for (Py_ssize_t k = 1; k < count; k++) {
        if (by_start_then_end(pairs + 2 * (k - 1), pairs + 2 * k) <= 0) continue;
        if (cut) {
            qsort(pairs, (size_t)count, 2 * sizeof(int64_t), by_start_then_end);
            return 0;
        }
        cut = k;
    }
    if (!cut) return 0;
    int64_t *first = PyMem_Malloc((size_t)cut * 2 * sizeof(int64_t));
    if (!first) return -1;
    memcpy(first, pairs, (size_t)cut * 2 * sizeof(int64_t));
    Py_ssize_t a = 0, b = cut, out = 0; /* first[a..cut) and pairs[b..count) into pairs[out..) */
    while (a < cut) {
        const int64_t *take = b < count && by_start_then_end(pairs + 2 * b, first + 2 * a) < 0 ? pairs + 2 * b++
                                                                                               : first + 2 * a++;
        pairs[2 * out] = take[0];
        pairs[2 * out + 1] = take[1];
        out++;
    }
    PyMem_Free(first);
    return 0; /* (what is left of the second run is in place) */
}

/* When a rank's communication nodes run, as summary._merge makes it: the union of their
   (start, end) with end > start, sorted, as a list of (start, end) tuples. */
static PyObject *talking_of(const Rank *R) {
    int64_t *pairs = PyMem_Malloc((size_t)(R->ntalk ? R->ntalk : 1) * 2 * sizeof(int64_t));
    if (!pairs) return PyErr_NoMemory();
    Py_ssize_t count = 0;
    for (Py_ssize_t j = 0; j < R->ntalk; j++) {
        Py_ssize_t i = (Py_ssize_t)R->talk[j];
        if (R->node[i].end > R->node[i].start) {
            pairs[2 * count] = R->node[i].start;
            pairs[2 * count + 1] = R->node[i].end;
            count++;
        }
    }
    if (sort_pairs(pairs, count) < 0) {
        PyMem_Free(pairs);
        return PyErr_NoMemory();
    }
    Py_ssize_t merged = merge_sorted_pairs(pairs, count);
    PyObject *list = PyList_New(merged);
    for (Py_ssize_t k = 0; list && k < merged; k++) {
        PyObject *pair = Py_BuildValue("(LL)", (long long)pairs[2 * k], (long long)pairs[2 * k + 1]);
        if (!pair) Py_CLEAR(list);
        else PyList_SET_ITEM(list, k, pair);
    }
    PyMem_Free(pairs);
    return list;
}

/* Per traffic class (count, bytes, busy ns): its nodes, their sizes and their (end - start)
   added up; None where a sum does not fit an int64 (summary.py then sums in Python). */
static PyObject *traffic_of(const Rank *R) {
    int64_t *sums = PyMem_Calloc((size_t)(R->nklass ? R->nklass : 1), 3 * sizeof(int64_t));
    if (!sums) return PyErr_NoMemory();
    int overflow = 0;
    for (Py_ssize_t j = 0; j < R->ntalk; j++) {
        if (R->klass[j] < 0) continue;
        Py_ssize_t i = (Py_ssize_t)R->talk[j];
        int64_t *sum = &sums[3 * R->klass[j]];
        sum[0]++;
        overflow |= __builtin_add_overflow(sum[1], R->bytes[j], &sum[1]);
        overflow |= __builtin_add_overflow(sum[2], R->node[i].end - R->node[i].start, &sum[2]);
    }
    PyObject *list = overflow ? Py_NewRef(Py_None) : PyList_New(R->nklass);
    for (Py_ssize_t k = 0; !overflow && list && k < R->nklass; k++) {
        PyObject *row = Py_BuildValue("(LLL)", (long long)sums[3 * k], (long long)sums[3 * k + 1],
                                      (long long)sums[3 * k + 2]);
        if (!row) Py_CLEAR(list);
        else PyList_SET_ITEM(list, k, row);
    }
    PyMem_Free(sums);
    return list;
}

#define OUTPUTS 6

static PyObject *results(Loop *L) {
    PyObject *out[OUTPUTS];
    for (int k = 0; k < OUTPUTS; k++) out[k] = PyList_New(L->nranks);
    for (int k = 0; k < OUTPUTS; k++)
        if (!out[k]) goto fail;
    for (Py_ssize_t r = 0; r < L->nranks; r++) {
        Rank *R = &L->ranks[r];
        PyObject *made[OUTPUTS] = {field_of(R, offsetof(Slot, start)), field_of(R, offsetof(Slot, end)),
                                   field_of(R, offsetof(Slot, cause)),
                                   stretches_of(&R->computing), talking_of(R), traffic_of(R)};
        for (int k = 0; k < OUTPUTS; k++) {
            if (!made[k]) {
                for (int j = 0; j < OUTPUTS; j++) Py_XDECREF(made[j]);
                goto fail;
            }
            PyList_SET_ITEM(out[k], r, made[k]);
        }
        free_rank(R); /* the lists grow as the slots go: not both at their largest */
    }
    return Py_BuildValue("(NNNNNN)", out[0], out[1], out[2], out[3], out[4], out[5]);
fail:
    for (int k = 0; k < OUTPUTS; k++) Py_XDECREF(out[k]);
    return NULL;
}

static void free_loop(Loop *L) {
    for (Py_ssize_t r = 0; r < L->nranks; r++) free_rank(&L->ranks[r]);
    PyMem_Free(L->ranks);
    PyMem_Free(L->times.v);
    PyMem_Free(L->when.keys);
    PyMem_Free(L->when.values);
    for (Py_ssize_t b = 0; b < L->nbuckets; b++) PyMem_Free(L->buckets[b].v);
    PyMem_Free(L->buckets);
    PyMem_Free(L->free_buckets.v);
    PyMem_Free(L->counts.keys);
    PyMem_Free(L->counts.values);
    for (Py_ssize_t g = 0; L->pending && g < L->ngroups; g++) PyMem_Free(L->pending[g].v);
    PyMem_Free(L->pending);
    for (Py_ssize_t k = 0; k < L->cap_insts; k++) PyMem_Free(L->insts[k].entries.v);
    PyMem_Free(L->insts);
    PyMem_Free(L->free_insts.v);
    for (Py_ssize_t c = 0; L->sends && c < L->nchannels; c++) {
        PyMem_Free(L->sends[c].v);
        PyMem_Free(L->recvs[c].v);
    }
    PyMem_Free(L->sends);
    PyMem_Free(L->recvs);
    for (Py_ssize_t k = 0; k < L->arrays.len; k++) PyMem_Free((void *)(intptr_t)L->arrays.v[k]);
    PyMem_Free(L->arrays.v);
    PyMem_Free(L->converted.keys);
    PyMem_Free(L->converted.values);
}

/* The ranks' tables come from an iterator, one rank at a time, so that the Python lists of
   only one rank are alive at once (each is copied into the loop's own arrays); the numbers of
   groups and channels are the sizes of the dicts the iterator fills as it goes. */
static int load_ranks(Loop *L, PyObject *specs, int *bad, int64_t *total) {
    PyObject *it = PyObject_GetIter(specs);
    if (!it) return -1;
    int rc = -1;
    for (Py_ssize_t r = 0; r < L->nranks && !*bad; r++) {
        PyObject *spec = PyIter_Next(it);
        if (!spec) {
            if (PyErr_Occurred()) goto out;
            *bad = 1;
            break;
        }
        int loaded = PyTuple_Check(spec) ? load_rank(L, &L->ranks[r], spec, bad, total) : (*bad = 1, 0);
        Py_DECREF(spec);
        if (loaded < 0) goto out;
    }
    if (!*bad) {
        PyObject *extra = PyIter_Next(it);
        if (extra) {
            Py_DECREF(extra);
            *bad = 1;
        } else if (PyErr_Occurred()) {
            goto out;
        }
    }
    rc = 0;
out:
    Py_DECREF(it);
    return rc;
}

static PyObject *loop_run(PyObject *self, PyObject *args) {
    PyObject *specs, *groups, *channels;
    Py_ssize_t count;
    long long stride;
    int times = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnLO!O!|p", &specs, &count, &stride, &PyDict_Type, &groups, &PyDict_Type, &channels,
                          &times))
        return NULL;
    Loop L;
    memset(&L, 0, sizeof L);
    PyObject *result = NULL;
    int bad = 0;
    int64_t total = 0;
    L.nranks = count;
    L.timeline = times;
    L.stride = stride;
    L.max_group = L.max_channel = -1;
    if (stride < 1 || count < 0 || count >= INT32_MAX || stride >= INT32_MAX || (count && stride > TIME_LIMIT / count))
        Py_RETURN_NONE;
    L.ranks = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Rank));
    if (!L.ranks) {
        PyErr_NoMemory();
        goto out;
    }
    if (load_ranks(&L, specs, &bad, &total) < 0) goto out;
    L.ngroups = PyDict_GET_SIZE(groups);
    L.nchannels = PyDict_GET_SIZE(channels);
    if (bad || L.max_group >= L.ngroups || L.max_channel >= L.nchannels) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    L.pending = PyMem_Calloc((size_t)(L.ngroups ? L.ngroups : 1), sizeof(Vec));
    L.sends = PyMem_Calloc((size_t)(L.nchannels ? L.nchannels : 1), sizeof(Vec));
    L.recvs = PyMem_Calloc((size_t)(L.nchannels ? L.nchannels : 1), sizeof(Vec));
    if (!L.pending || !L.sends || !L.recvs) {
        PyErr_NoMemory();
        goto out;
    }
    if (run_loop(&L) < 0) goto out;
    for (Py_ssize_t r = 0; r < L.nranks; r++) {
        if (L.ranks[r].done != L.ranks[r].n) { /* a rank cannot finish: Python reports why */
            result = Py_NewRef(Py_None);
            goto out;
        }
    }
    result = times ? results(&L) : Py_NewRef(Py_True); /* (the dry run needs no times) */
out:
    free_loop(&L);
    return result;
}

/* ------------------------------------------------------------------ attributes of many objects */

/* An attribute read from object after object, as PyObject_GetAttr reads it. Where the objects'
   type holds the attribute as a data descriptor (a slot, a property) and looks attributes up the
   usual way, that descriptor decides the value whatever the instance holds, so it is found once
   and called directly: the lookup by name, per object, is most of what a read of a slot costs.
   The type's version tag tells when the type changed (CPython sets it to 0, and a new one once
   it is looked up again): then the descriptor is found again. */
typedef struct {
    PyObject *name;       /* borrowed */
    PyTypeObject *type;   /* the type `descr` was found on (a reference), or NULL */
    unsigned int version; /* its tp_version_tag then */
    PyObject *descr;      /* its data descriptor for `name` (a reference), or NULL */
} Field;

static void field_forget(Field *f) {
    Py_CLEAR(f->type);
    Py_CLEAR(f->descr);
}

static PyObject *field_of_object(Field *f, PyObject *object) {
    PyTypeObject *type = Py_TYPE(object);
    if (type != f->type || type->tp_version_tag != f->version || !f->descr) {
        field_forget(f);
        if (type->tp_getattro == PyObject_GenericGetAttr) {
            PyObject *found = PyObject_GetAttr((PyObject *)type, f->name); /* (tags the type's version) */
            if (!found) {
                PyErr_Clear(); /* (the object's own reading says what is wrong) */
            } else if (Py_TYPE(found)->tp_descr_get && Py_TYPE(found)->tp_descr_set && type->tp_version_tag) {
                f->type = (PyTypeObject *)Py_NewRef((PyObject *)type);
                f->version = type->tp_version_tag;
                f->descr = found;
            } else {
                Py_DECREF(found);
            }
        }
        if (!f->descr) return PyObject_GetAttr(object, f->name);
    }
    return Py_TYPE(f->descr)->tp_descr_get(f->descr, object, (PyObject *)type);
}

/* columns(objects, names) -> a list per name of the objects' values of that attribute, read in
   one pass over the objects (as [getattr(o, name) for o in objects] for each name). */
static PyObject *loop_columns(PyObject *self, PyObject *args) {
    PyObject *objects, *names;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &objects, &PyTuple_Type, &names)) return NULL;
    enum { MOST = 8 };
    Py_ssize_t count = PyList_GET_SIZE(objects), width = PyTuple_GET_SIZE(names);
    if (width > MOST) {
        PyErr_SetString(PyExc_ValueError, "columns() takes at most 8 attribute names");
        return NULL;
    }
    Field fields[MOST] = {{0}};
    PyObject *result = PyTuple_New(width);
    for (Py_ssize_t f = 0; result && f < width; f++) {
        fields[f].name = PyTuple_GET_ITEM(names, f);
        PyObject *column = PyList_New(count);
        if (!column) Py_CLEAR(result);
        else PyTuple_SET_ITEM(result, f, column);
    }
    for (Py_ssize_t j = 0; result && j < count; j++) {
        PyObject *object = PyList_GET_ITEM(objects, j);
        for (Py_ssize_t f = 0; f < width; f++) {
            PyObject *value = field_of_object(&fields[f], object);
            if (!value) {
                Py_CLEAR(result);
                break;
            }
            PyList_SET_ITEM(PyTuple_GET_ITEM(result, f), j, value);
        }
    }
    for (Py_ssize_t f = 0; f < MOST; f++) field_forget(&fields[f]);
    return result;
}

/* distinct(objects, names, places=None) -> (index, firsts): the objects told apart by the values
   of their attributes `names` (compared with ==, as dict keys are): index[j] numbers object j's
   values in the order they first appear, firsts[u] is the position of the first object with the
   u-th. With `places`, the objects are objects[places[0]], objects[places[1]], ... (positions in
   `places`, without a list of them made first). Neighbours alike (most communication nodes of a
   log) are compared without a key being made. */
static PyObject *loop_distinct(PyObject *self, PyObject *args) {
    PyObject *objects, *names, *places = Py_None;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!|O", &PyList_Type, &objects, &PyTuple_Type, &names, &places)) return NULL;
    if (places != Py_None && !PyList_Check(places)) {
        PyErr_SetString(PyExc_TypeError, "distinct() takes a list of places or None");
        return NULL;
    }
    enum { MOST = 8 };
    Py_ssize_t count = PyList_GET_SIZE(places == Py_None ? objects : places), width = PyTuple_GET_SIZE(names);
    Py_ssize_t number = -1;
    if (width < 1 || width > MOST) {
        PyErr_SetString(PyExc_ValueError, "distinct() takes 1 to 8 attribute names");
        return NULL;
    }
    PyObject *previous[MOST] = {NULL}, *current[MOST] = {NULL};
    Field fields[MOST] = {{0}};
    for (Py_ssize_t f = 0; f < width; f++) fields[f].name = PyTuple_GET_ITEM(names, f);
    PyObject *index = PyList_New(count), *firsts = PyList_New(0), *seen = PyDict_New(), *result = NULL;
    if (!index || !firsts || !seen) goto out;
    for (Py_ssize_t j = 0; j < count; j++) {
        Py_ssize_t at = j;
        if (places != Py_None && (at = position(PyList_GET_ITEM(places, j), PyList_GET_SIZE(objects))) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "distinct(): a place outside the objects");
            goto out;
        }
        PyObject *object = PyList_GET_ITEM(objects, at);
        int same = number >= 0;
        for (Py_ssize_t f = 0; f < width; f++) {
            current[f] = field_of_object(&fields[f], object);
            if (!current[f]) goto out;
            if (same) {
                same = PyObject_RichCompareBool(current[f], previous[f], Py_EQ);
                if (same < 0) goto out;
            }
        }
        if (!same) {
            PyObject *key = PyTuple_New(width);
            if (!key) goto out;
            for (Py_ssize_t f = 0; f < width; f++) PyTuple_SET_ITEM(key, f, Py_NewRef(current[f]));
            PyObject *known = PyDict_GetItemWithError(seen, key);
            if (known) {
                number = PyLong_AsSsize_t(known);
            } else if (!PyErr_Occurred()) {
                number = PyList_GET_SIZE(firsts);
                PyObject *numbered = PyLong_FromSsize_t(number), *place = PyLong_FromSsize_t(j);
                int failed = !numbered || !place || PyDict_SetItem(seen, key, numbered) < 0 ||
                             PyList_Append(firsts, place) < 0;
                Py_XDECREF(numbered);
                Py_XDECREF(place);
                if (failed) {
                    Py_DECREF(key);
                    goto out;
                }
            }
            Py_DECREF(key);
            if (PyErr_Occurred()) goto out;
        }
        for (Py_ssize_t f = 0; f < width; f++) { /* the values to compare the next object's with */
            Py_XSETREF(previous[f], current[f]);
            current[f] = NULL;
        }
        PyObject *numbered = PyLong_FromSsize_t(number);
        if (!numbered) goto out;
        PyList_SET_ITEM(index, j, numbered);
    }
    result = PyTuple_Pack(2, index, firsts);
out:
    for (Py_ssize_t f = 0; f < MOST; f++) {
        Py_XDECREF(previous[f]);
        Py_XDECREF(current[f]);
        field_forget(&fields[f]);
    }
    Py_XDECREF(index);
    Py_XDECREF(firsts);
    Py_XDECREF(seen);
    return result;
}

/* ------------------------------------------------------------------ a program's dependents */

/* dependents(deps_of, places, base, index_of) -> (next_of, more, ndeps, missing), or None:
   engine.dependents' tables, which the Python function there specifies. Node i's dependency
   d is the node at index d - base (index_of None: ids base, base + 1, ...) or index_of[d];
   `places` is positions(count), whose ints the tables hold instead of new ones. None (the
   Python function runs and says what is wrong) for anything but plain ints where the
   contiguous ids need arithmetic, or lists of another length. */
static PyObject *loop_dependents(PyObject *self, PyObject *args) {
    PyObject *deps_of, *places, *base_obj, *index_of;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!OO", &PyList_Type, &deps_of, &PyList_Type, &places, &base_obj, &index_of))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(places);
    int contiguous = index_of == Py_None, overflow = 0;
    long long base = PyLong_CheckExact(base_obj) ? PyLong_AsLongLongAndOverflow(base_obj, &overflow) : 0;
    if (PyErr_Occurred()) return NULL;
    if (PyList_GET_SIZE(deps_of) != count || (contiguous && (!PyLong_CheckExact(base_obj) || overflow)) ||
        (!contiguous && !PyDict_CheckExact(index_of)))
        Py_RETURN_NONE;
    size_t room = (size_t)(count ? count : 1);
    Py_ssize_t *next = PyMem_Malloc(room * sizeof(Py_ssize_t)), *seen_by = PyMem_Malloc(room * sizeof(Py_ssize_t));
    PyObject **lists = PyMem_Calloc(room, sizeof(PyObject *)); /* borrowed: `more` holds them */
    PyObject *more = PyDict_New(), *missing = PyDict_New(), *ndeps = PyList_New(count), *next_of = NULL, *result = NULL;
    int plain = 1; /* false: a value the Python function must see */
    if (!next || !seen_by || !lists || !more || !missing || !ndeps) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t j = 0; j < count; j++) next[j] = NO_DEPENDENT, seen_by[j] = -1;
    for (Py_ssize_t i = 0; i < count && plain; i++) {
        PyObject *deps = PyList_GET_ITEM(deps_of, i);
        if (!PyList_Check(deps) && !PyTuple_Check(deps)) { plain = 0; break; }
        Py_ssize_t width = PySequence_Fast_GET_SIZE(deps), need = 0;
        PyObject **items = PySequence_Fast_ITEMS(deps);
        for (Py_ssize_t k = 0; k < width; k++) {
            PyObject *dep = items[k];
            Py_ssize_t j = -1; /* -1: no such node */
            if (contiguous) {
                if (!PyLong_CheckExact(dep)) { plain = 0; break; }
                long long id = PyLong_AsLongLongAndOverflow(dep, &overflow), at;
                if (PyErr_Occurred()) goto out;
                if (overflow || __builtin_sub_overflow(id, base, &at)) { /* past 64 bits: as Python subtracts */
                    PyObject *diff = PyNumber_Subtract(dep, base_obj);
                    if (!diff) goto out;
                    at = PyLong_AsLongLongAndOverflow(diff, &overflow);
                    Py_DECREF(diff);
                    if (PyErr_Occurred()) goto out;
                    if (overflow) at = -1;
                }
                if (at >= 0 && at < count) j = (Py_ssize_t)at;
            } else {
                PyObject *found = PyDict_GetItemWithError(index_of, dep);
                if (!found && PyErr_Occurred()) goto out;
                if (found) {
                    if (!PyLong_CheckExact(found)) { plain = 0; break; }
                    Py_ssize_t at = PyLong_AsSsize_t(found);
                    if (at == -1 && PyErr_Occurred()) goto out;
                    if (at >= 0 && at < count) j = at;
                }
            }
            if (j < 0) { /* never satisfied: counted, and listed under the node */
                PyObject *listed = PyDict_GetItemWithError(missing, PyList_GET_ITEM(places, i));
                if (!listed) {
                    if (PyErr_Occurred()) goto out;
                    listed = PyList_New(0);
                    int failed = !listed || PyDict_SetItem(missing, PyList_GET_ITEM(places, i), listed) < 0;
                    Py_XDECREF(listed);
                    if (failed) goto out;
                }
                if (PyList_Append(listed, dep) < 0) goto out;
                need++;
                continue;
            }
            if (seen_by[j] == i) continue; /* the same dependency twice counts once */
            seen_by[j] = i;
            need++;
            if (next[j] == NO_DEPENDENT) {
                next[j] = i;
                continue;
            }
            if (next[j] >= 0) { /* a second dependent: from now on `more` lists them */
                PyObject *pair = PyList_New(2);
                if (!pair) goto out;
                PyList_SET_ITEM(pair, 0, Py_NewRef(PyList_GET_ITEM(places, next[j])));
                PyList_SET_ITEM(pair, 1, Py_NewRef(PyList_GET_ITEM(places, i)));
                int failed = PyDict_SetItem(more, PyList_GET_ITEM(places, j), pair) < 0;
                Py_DECREF(pair);
                if (failed) goto out;
                lists[j] = pair;
                next[j] = SEVERAL;
            } else if (PyList_Append(lists[j], PyList_GET_ITEM(places, i)) < 0) {
                goto out;
            }
        }
        PyObject *needed = PyLong_FromSsize_t(need);
        if (!needed) goto out;
        PyList_SET_ITEM(ndeps, i, needed);
    }
    if (!plain) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    next_of = PyList_New(count);
    if (!next_of) goto out;
    for (Py_ssize_t j = 0; j < count; j++) {
        PyObject *value = next[j] >= 0 ? Py_NewRef(PyList_GET_ITEM(places, next[j])) : PyLong_FromSsize_t(next[j]);
        if (!value) goto out;
        PyList_SET_ITEM(next_of, j, value);
    }
    result = PyTuple_Pack(4, next_of, more, ndeps, missing);
out:
    PyMem_Free(next);
    PyMem_Free(seen_by);
    PyMem_Free(lists);
    Py_XDECREF(next_of);
    Py_XDECREF(more);
    Py_XDECREF(missing);
    Py_XDECREF(ndeps);
    return result;
}

/* ------------------------------------------------------------------ the critical path's credits */

/* The int in list[k] as an int64; *bad set when it is no int of 64 bits. */
static int64_t item_int64(PyObject *list, Py_ssize_t k, int *bad) {
    PyObject *x = PyList_GET_ITEM(list, k);
    int overflow = 0;
    long long value = PyLong_CheckExact(x) ? PyLong_AsLongLongAndOverflow(x, &overflow) : 0;
    if (!PyLong_CheckExact(x) || overflow) *bad = 1;
    return value;
}

/* The number `table` (a dict numbering its keys 0, 1, ... as they come) gives key: a new key
   gets the next, is appended to `keys` and has *added set. -1 on an error. */
static Py_ssize_t number_of(PyObject *table, PyObject *keys, PyObject *key, int *added) {
    *added = 0;
    if (!key) return -1;
    PyObject *found = PyDict_GetItemWithError(table, key);
    if (found) return PyLong_AsSsize_t(found);
    if (PyErr_Occurred()) return -1;
    Py_ssize_t next = PyList_GET_SIZE(keys);
    PyObject *number = PyLong_FromSsize_t(next);
    int failed = !number || PyDict_SetItem(table, key, number) < 0 || PyList_Append(keys, key) < 0;
    Py_XDECREF(number);
    *added = 1;
    return failed ? -1 : next;
}

/* {keys[n]: ns[n]} in the order of `keys`. */
static PyObject *sums_of(PyObject *keys, const Vec *ns) {
    PyObject *sums = PyDict_New();
    for (Py_ssize_t n = 0; sums && n < PyList_GET_SIZE(keys); n++) {
        PyObject *value = PyLong_FromLongLong(ns->v[n]);
        if (!value || PyDict_SetItem(sums, PyList_GET_ITEM(keys, n), value) < 0) Py_CLEAR(sums);
        Py_XDECREF(value);
    }
    return sums;
}

/* [(categories[of[n]], names[n], ns[n], counts[n]) for each n] */
static PyObject *rows_of(PyObject *categories, const Vec *of, PyObject *names, const Vec *ns, const Vec *counts) {
    Py_ssize_t count = PyList_GET_SIZE(names);
    PyObject *rows = PyList_New(count);
    for (Py_ssize_t n = 0; rows && n < count; n++) {
        PyObject *row = PyTuple_New(4), *sum = PyLong_FromLongLong(ns->v[n]), *times = PyLong_FromLongLong(counts->v[n]);
        if (!row || !sum || !times) {
            Py_XDECREF(row), Py_XDECREF(sum), Py_XDECREF(times);
            Py_CLEAR(rows);
            break;
        }
        PyTuple_SET_ITEM(row, 0, Py_NewRef(PyList_GET_ITEM(categories, of->v[n])));
        PyTuple_SET_ITEM(row, 1, Py_NewRef(PyList_GET_ITEM(names, n)));
        PyTuple_SET_ITEM(row, 2, sum);
        PyTuple_SET_ITEM(row, 3, times);
        PyList_SET_ITEM(rows, n, row);
    }
    return rows;
}

/* credit_path(cause, ends, stride, r, i, nodes, limit, category_of) -> (steps, by_category, top)
   or None: summary._credit_path (its specification) step for step. From node i of position r
   back along `cause` (-1: none), at most `limit` nodes, each credited with the time from its
   cause's end to its own end; the credits summed per category (category_of(r, node), asked once
   per position, kind and group), a dict, and per category and name, rows of (category, name,
   ns, count); both in the order first met. nodes: each position's list of nodes. None when a
   table is not as the scheduler makes it (a position out of range, a time that is no int of
   64 bits, a sum past 64 bits): the Python runs instead and says what is wrong. */
static PyObject *loop_credit_path(PyObject *self, PyObject *args) {
    PyObject *cause, *ends, *nodes, *category_of;
    Py_ssize_t stride, r, i, limit;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!nnnO!nO", &PyList_Type, &cause, &PyList_Type, &ends, &stride, &r, &i,
                          &PyList_Type, &nodes, &limit, &category_of))
        return NULL;
    static const char *const attributes[] = {"kind", "group", "name"};
    Field fields[3] = {{0}};
    /* Numbered as first met, each dict beside the list of its keys: (position, kind, group);
       categories; per category, the names of its nodes (a dict each). */
    PyObject *seen = PyDict_New(), *seen_keys = PyList_New(0), *numbered = PyDict_New(), *categories = PyList_New(0),
             *names_in = PyList_New(0), *names = PyList_New(0), *result = NULL;
    PyObject *last_kind = NULL, *last_group = NULL; /* the last node's (references), whose category is k */
    Vec category_of_seen = {0}, category_ns = {0}, name_category = {0}, name_ns = {0}, name_count = {0};
    int bad = 0, added;
    for (int f = 0; f < 3; f++)
        if (!(fields[f].name = PyUnicode_InternFromString(attributes[f]))) goto out;
    if (!seen || !seen_keys || !numbered || !categories || !names_in || !names) goto out;
    Py_ssize_t ranks = PyList_GET_SIZE(cause), steps = 0, k = -1, last_r = -1;
    if (stride <= 0 || PyList_GET_SIZE(ends) != ranks || PyList_GET_SIZE(nodes) != ranks) goto odd;
    int64_t end = 0;
    while (steps < limit) {
        if (r < 0 || r >= ranks) goto odd;
        PyObject *causes = PyList_GET_ITEM(cause, r), *times = PyList_GET_ITEM(ends, r), *row = PyList_GET_ITEM(nodes, r);
        if (!PyList_Check(causes) || !PyList_Check(times) || !PyList_Check(row) || i < 0 ||
            i >= PyList_GET_SIZE(causes) || i >= PyList_GET_SIZE(times) || i >= PyList_GET_SIZE(row))
            goto odd;
        if (steps == 0) end = item_int64(times, i, &bad);
        int64_t c = item_int64(causes, i, &bad), before = 0, credit = 0;
        Py_ssize_t cr = 0, ci = 0;
        if (c >= 0) {
            cr = (Py_ssize_t)(c / stride), ci = (Py_ssize_t)(c % stride);
            PyObject *earlier = cr < ranks ? PyList_GET_ITEM(ends, cr) : NULL;
            if (!earlier || !PyList_Check(earlier) || ci >= PyList_GET_SIZE(earlier)) goto odd;
            before = item_int64(earlier, ci, &bad);
        }
        if (bad || (end > before && __builtin_sub_overflow(end, before, &credit))) goto odd;
        steps++;

        PyObject *node = PyList_GET_ITEM(row, i), *value[3];
        for (int f = 0; f < 3; f++) value[f] = field_of_object(&fields[f], node);
        Py_ssize_t n = -1;
        if (!value[0] || !value[1] || !value[2]) goto node_done;
        /* the node's category, by its position, kind and group: the last node's when those are
           the same objects (a rank's chain of computation), else found or asked of Python once */
        if (r != last_r || value[0] != last_kind || value[1] != last_group) {
            PyObject *where = PyLong_FromSsize_t(r);
            PyObject *key = where ? PyTuple_Pack(3, where, value[0], value[1]) : NULL;
            Py_XDECREF(where);
            Py_ssize_t s = number_of(seen, seen_keys, key, &added);
            Py_XDECREF(key);
            k = -1;
            if (s >= 0 && added) {
                PyObject *category = PyObject_CallFunction(category_of, "nO", r, node);
                k = number_of(numbered, categories, category, &added);
                Py_XDECREF(category);
                PyObject *fresh = k >= 0 && added ? PyDict_New() : NULL;
                if (k >= 0 && added && (!fresh || PyList_Append(names_in, fresh) < 0 || vec_push(&category_ns, 0) < 0))
                    k = -1;
                Py_XDECREF(fresh);
                if (k >= 0 && vec_push(&category_of_seen, k) < 0) k = -1;
            } else if (s >= 0) {
                k = (Py_ssize_t)category_of_seen.v[s];
            }
            last_r = k < 0 ? -1 : r;
            Py_XSETREF(last_kind, Py_NewRef(value[0]));
            Py_XSETREF(last_group, Py_NewRef(value[1]));
        }
        if (k < 0) goto node_done;
        n = number_of(PyList_GET_ITEM(names_in, k), names, value[2], &added); /* and the node's name in it */
        if (n >= 0 && added && (vec_push(&name_category, k) < 0 || vec_push(&name_ns, 0) < 0 || vec_push(&name_count, 0) < 0))
            n = -1;
    node_done:
        for (int f = 0; f < 3; f++) Py_XDECREF(value[f]);
        if (n < 0) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
            goto out;
        }
        if (__builtin_add_overflow(category_ns.v[k], credit, &category_ns.v[k]) ||
            __builtin_add_overflow(name_ns.v[n], credit, &name_ns.v[n]))
            goto odd;
        name_count.v[n]++;
        if (c < 0) break;
        r = cr, i = ci, end = before;
    }
    PyObject *by_category = sums_of(categories, &category_ns);
    PyObject *top = by_category ? rows_of(categories, &name_category, names, &name_ns, &name_count) : NULL;
    if (top) result = Py_BuildValue("(nOO)", steps, by_category, top);
    Py_XDECREF(by_category);
    Py_XDECREF(top);
    goto out;
odd:
    result = Py_NewRef(Py_None);
out:
    for (int f = 0; f < 3; f++) {
        field_forget(&fields[f]);
        Py_XDECREF(fields[f].name);
    }
    Py_XDECREF(last_kind);
    Py_XDECREF(last_group);
    Py_XDECREF(seen);
    Py_XDECREF(seen_keys);
    Py_XDECREF(numbered);
    Py_XDECREF(categories);
    Py_XDECREF(names_in);
    Py_XDECREF(names);
    PyMem_Free(category_of_seen.v);
    PyMem_Free(category_ns.v);
    PyMem_Free(name_category.v);
    PyMem_Free(name_ns.v);
    PyMem_Free(name_count.v);
    return result;
}

static PyMethodDef methods[] = {
    {"columns", loop_columns, METH_VARARGS,
     "columns(objects, names) -> a list per attribute name of the objects' values, read in one pass."},
    {"credit_path", loop_credit_path, METH_VARARGS,
     "credit_path(cause, ends, stride, r, i, nodes, limit, category_of) -> (steps, by_category, top) or None: "
     "summary._credit_path's walk back along the causes and its sums."},
    {"dependents", loop_dependents, METH_VARARGS,
     "dependents(deps_of, places, base, index_of) -> (next_of, more, ndeps, missing) or None: the tables "
     "engine.dependents makes."},
    {"distinct", loop_distinct, METH_VARARGS,
     "distinct(objects, names, places=None) -> (index, firsts): the objects (or objects[p] for p in places) "
     "numbered by the values of their attributes `names`, in the order those first appear, and the position of "
     "the first object of each."},
    {"run", loop_run, METH_VARARGS,
     "run(ranks, count, stride, groups, channels, times=True) -> (starts, ends, cause, computing, talking, "
     "traffic), True (times false) or None: engine.Engine.run's loop over the tables Engine._native_inputs "
     "yields; None when the Python loop must run instead."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_loop", "The scheduler's event loop in C.", -1, methods};

PyMODINIT_FUNC PyInit__loop(void) { return PyModule_Create(&module); }
