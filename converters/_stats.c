/* The numbers `et-convert stats` shows of a measured set, over its nodes as columns
 * (model.MeasuredColumns) instead of Nodes: stats.measured_summary's per-rank breakdown and
 * traffic by group kind, and what stats._collective_instances gives traffic_by_group and
 * slowest_collectives, per group. The Python functions over Nodes are the specification;
 * tests/test_stats_columns.py holds the two to each other on the samples and random sets.
 * Optional: without this module `stats` reads Nodes, with the same numbers. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_spans.h"

/* What a template's nodes are to the breakdown (stats.measured_summary) */
enum { OTHER = 0, BUSY = 1 /* compute, memory */, TALK = 2 /* a send or a collective */, RECV = 3 };

typedef struct {
    Py_buffer view;
    const int64_t *at;
    Py_ssize_t count;
} column;

static int open_column(PyObject *object, column *c)
{
    if (PyObject_GetBuffer(object, &c->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (c->view.itemsize != 8 || !c->view.format || strcmp(c->view.format, "q") != 0) {
        PyBuffer_Release(&c->view);
        PyErr_SetString(PyExc_TypeError, "numbers: columns of int64 (format 'q') expected");
        return -1;
    }
    c->at = c->view.buf;
    c->count = c->view.len / 8;
    return 0;
}

/* scheduler.summary._merge: `n` (start, end) pairs sorted and joined (_spans.h); the new count. */
static Py_ssize_t merge(int64_t *pairs, Py_ssize_t n)
{
    qsort(pairs, n, 2 * sizeof *pairs, by_start_then_end);
    return merge_sorted_pairs(pairs, n);
}

/* scheduler.summary._measure_outside: the length of `talk` outside `busy` (merged pairs). */
static int64_t outside(const int64_t *talk, Py_ssize_t nt, const int64_t *busy, Py_ssize_t nb)
{
    int64_t total = 0;
    Py_ssize_t j = 0;
    for (Py_ssize_t i = 0; i < nt; i++) {
        int64_t a = talk[2 * i], b = talk[2 * i + 1], covered = 0;
        while (j < nb && busy[2 * j + 1] <= a)
            j++;
        for (Py_ssize_t k = j; k < nb && busy[2 * k] < b; k++)
            covered += (b < busy[2 * k + 1] ? b : busy[2 * k + 1]) - (a > busy[2 * k] ? a : busy[2 * k]);
        total += (b - a) - covered;
    }
    return total;
}

/* One collective as the instances see it: its rank (position in `ranks`), node and group. */
typedef struct {
    Py_ssize_t rank, node, group;
} collective;

typedef struct {
    int64_t negative_span;
    Py_ssize_t k;
} candidate;

/* Everything numbers() holds, released in one place. */
typedef struct {
    Py_ssize_t ranks;
    column (*cols)[4];  /* per rank: start, duration, parent, template */
    int opened;  /* columns opened so far */
    int64_t *busy, *talk;  /* a rank's (start, end) pairs */
    collective *coll, *sorted;
    Py_ssize_t *first_of, *count_of, *place;
    int64_t *first_starts, *last_starts, *last_ends, *first_sizes;  /* per instance k of a group */
    Py_ssize_t *present, *last_members, *last_nodes;
    candidate *best;
} state;

static void release(state *s)
{
    for (int k = 0; k < s->opened; k++)
        PyBuffer_Release(&s->cols[k / 4][k % 4].view);
    PyMem_Free(s->cols);
    PyMem_Free(s->busy);
    PyMem_Free(s->talk);
    PyMem_Free(s->coll);
    PyMem_Free(s->sorted);
    PyMem_Free(s->first_of);
    PyMem_Free(s->count_of);
    PyMem_Free(s->place);
    PyMem_Free(s->first_starts);
    PyMem_Free(s->last_starts);
    PyMem_Free(s->last_ends);
    PyMem_Free(s->first_sizes);
    PyMem_Free(s->present);
    PyMem_Free(s->last_members);
    PyMem_Free(s->last_nodes);
    PyMem_Free(s->best);
}

#define TOO_BIG (-2)  /* a sum beyond 64 bits: the caller reads Nodes (Python's ints do not overflow) */

/* The per-rank breakdown of rank r: (finish, compute, exposed) appended to `out`, the traffic
 * rows summed, the rank's collectives appended to s->coll. */
static int rank_numbers(state *s, Py_ssize_t r, const uint8_t *codes, const int64_t *sizes, const int64_t *rows,
                        const int64_t *groups, const int64_t *waits, Py_ssize_t templates, int64_t (*traffic)[3],
                        Py_ssize_t *collectives, PyObject *out)
{
    const int64_t *start = s->cols[r][0].at, *duration = s->cols[r][1].at, *parent = s->cols[r][2].at,
                  *template = s->cols[r][3].at;
    Py_ssize_t n = s->cols[r][0].count, nb = 0, nt = 0;
    int64_t finish = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t t = template[i], end;
        if (t < 0 || t >= templates) {
            PyErr_SetString(PyExc_ValueError, "numbers: a template out of range");
            return -1;
        }
        if (__builtin_add_overflow(start[i], duration[i], &end))
            return TOO_BIG;
        if (i == 0 || end > finish)
            finish = end;
        if (groups[t] >= 0)
            s->coll[(*collectives)++] = (collective){r, i, groups[t]};
        if (end <= start[i] || parent[i] >= 0)
            continue;  /* sub-operations run inside their parent step */
        if (codes[t] == BUSY) {
            s->busy[2 * nb] = start[i], s->busy[2 * nb + 1] = end, nb++;
        } else if (codes[t] != OTHER) {
            int64_t from;
            if (__builtin_add_overflow(start[i], codes[t] == RECV ? waits[t] : 0, &from))
                return TOO_BIG;
            if (from < end)
                s->talk[2 * nt] = from, s->talk[2 * nt + 1] = end, nt++;
            if (codes[t] == TALK) {
                int64_t *row = traffic[rows[t]];
                row[0] += 1;
                if (__builtin_add_overflow(row[1], sizes[t], &row[1]) ||
                    __builtin_add_overflow(row[2], end - start[i], &row[2]))
                    return TOO_BIG;
            }
        }
    }
    nb = merge(s->busy, nb);
    nt = merge(s->talk, nt);
    int64_t compute = 0;
    for (Py_ssize_t k = 0; k < nb; k++)
        if (__builtin_add_overflow(compute, s->busy[2 * k + 1] - s->busy[2 * k], &compute))
            return TOO_BIG;
    PyObject *row = Py_BuildValue("(LLL)", (long long)finish, (long long)compute,
                                  (long long)outside(s->talk, nt, s->busy, nb));
    if (!row)
        return -1;
    int appended = PyList_Append(out, row);
    Py_DECREF(row);
    return appended;
}

/* Group g's instances (its members' k-th collectives), as stats._instances_of folds them member
 * by member: (its first collective's place in scan order, g, instances, bytes, span, candidates). */
static PyObject *group_numbers(state *s, const collective *c, Py_ssize_t count, Py_ssize_t first, Py_ssize_t g,
                               const int64_t *sizes, int limit)
{
    /* c: the group's collectives by rank, in node order; the longest member's count is K */
    Py_ssize_t K = 0;
    for (Py_ssize_t i = 0, run = 0; i < count; i++) {
        run = i && c[i].rank == c[i - 1].rank ? run + 1 : 1;
        if (run > K)
            K = run;
    }
    for (Py_ssize_t i = 0, member = -1, k = 0; i < count; i++, k++) {
        if (!i || c[i].rank != c[i - 1].rank)
            member++, k = 0;
        int64_t start = s->cols[c[i].rank][0].at[c[i].node];
        int64_t end = start + s->cols[c[i].rank][1].at[c[i].node];  /* (checked in rank_numbers) */
        if (!member || s->present[k] == 0) {
            s->present[k] = 1;
            s->first_starts[k] = s->last_starts[k] = start;
            s->last_ends[k] = end;
            s->last_members[k] = i;
            s->first_sizes[k] = sizes[s->cols[c[i].rank][3].at[c[i].node]];  /* the lowest rank's */
            continue;
        }
        s->present[k] += 1;
        if (start < s->first_starts[k])
            s->first_starts[k] = start;
        if (start > s->last_starts[k])  /* the lowest rank on a tie */
            s->last_starts[k] = start, s->last_members[k] = i;
        if (end > s->last_ends[k])
            s->last_ends[k] = end;
    }
    int64_t bytes = 0, span_sum = 0;
    Py_ssize_t kept = 0;
    for (Py_ssize_t k = 0; k < K; k++) {
        int64_t negative;
        if (__builtin_add_overflow(bytes, s->first_sizes[k], &bytes) ||
            __builtin_sub_overflow(s->first_starts[k], s->last_ends[k], &negative) ||
            __builtin_sub_overflow(span_sum, negative, &span_sum))
            return Py_NewRef(Py_Ellipsis);  /* TOO_BIG */
        if (s->present[k] < 2)
            continue;
        /* the `limit` smallest (negative span, k), as heapq.nsmallest keeps them */
        Py_ssize_t at = kept;
        while (at > 0 && negative < s->best[at - 1].negative_span)
            at--;
        if (at >= limit)
            continue;
        if (kept < limit)
            kept++;
        memmove(s->best + at + 1, s->best + at, (kept - 1 - at) * sizeof *s->best);
        s->best[at] = (candidate){negative, k};
    }
    PyObject *candidates = PyList_New(kept);
    for (Py_ssize_t j = 0; candidates && j < kept; j++) {
        Py_ssize_t k = s->best[j].k;
        const collective *last = &c[s->last_members[k]];
        PyObject *row = Py_BuildValue("(LnnnLL)", (long long)s->best[j].negative_span, k, last->rank, last->node,
                                      (long long)(s->last_starts[k] - s->first_starts[k]),
                                      (long long)sizes[s->cols[last->rank][3].at[last->node]]);
        if (!row)
            Py_CLEAR(candidates);
        else
            PyList_SET_ITEM(candidates, j, row);
    }
    memset(s->present, 0, K * sizeof *s->present);
    if (!candidates)
        return NULL;
    return Py_BuildValue("(nnnLLN)", first, g, K, (long long)bytes, (long long)span_sum, candidates);
}

static int read_table(PyObject *object, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count)
{
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len != itemsize * count) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "numbers: a per-template table of the wrong length");
        return -1;
    }
    return 0;
}

/* numbers(ranks, codes, sizes, rows, groups, waits, row_count, group_count, limit): `ranks` a
 * list of (start, duration, parent, template) int64 columns in ascending rank order; per
 * template: codes (bytes: OTHER, BUSY, TALK, RECV), sizes, traffic row (-1: none), group (-1:
 * not a collective) and wait (int64 each). Returns (per rank (finish, compute, exposed), per
 * row (ops, bytes, busy), per group met (first place, group, instances, bytes, span,
 * candidates (negative span, k, rank position, node, wait, bytes)), in the order first met), or None
 * when a sum goes beyond 64 bits. */
static PyObject *numbers(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9 || !PyList_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "numbers(ranks: list, codes: bytes, sizes, rows, groups, waits, "
                                         "row_count: int, group_count: int, limit: int)");
        return NULL;
    }
    Py_ssize_t row_count = PyLong_AsSsize_t(args[6]), group_count = PyLong_AsSsize_t(args[7]);
    long limit = PyLong_AsLong(args[8]);
    if (PyErr_Occurred())
        return NULL;
    if (row_count < 0 || group_count < 0 || limit < 0 || limit > 1000) {
        PyErr_SetString(PyExc_ValueError, "numbers: counts out of range");
        return NULL;
    }
    Py_ssize_t templates = PyBytes_GET_SIZE(args[1]);
    const uint8_t *codes = (const uint8_t *)PyBytes_AS_STRING(args[1]);
    Py_buffer tables[4];
    int tables_open = 0;
    for (; tables_open < 4; tables_open++)
        if (read_table(args[2 + tables_open], &tables[tables_open], 8, templates) < 0)
            break;
    state s = {0};
    PyObject *result = NULL, *per_rank = NULL, *per_group = NULL;
    int64_t (*traffic)[3] = NULL;
    if (tables_open < 4)
        goto done;
    const int64_t *sizes = tables[0].buf, *rows = tables[1].buf, *groups = tables[2].buf, *waits = tables[3].buf;
    for (Py_ssize_t t = 0; t < templates; t++) {
        if (codes[t] > RECV || rows[t] >= row_count || (codes[t] == TALK && rows[t] < 0) || groups[t] >= group_count) {
            PyErr_SetString(PyExc_ValueError, "numbers: a template's row or group out of range");
            goto done;
        }
    }
    s.ranks = PyList_GET_SIZE(args[0]);
    s.cols = PyMem_Calloc(s.ranks ? s.ranks : 1, sizeof *s.cols);
    if (!s.cols)
        goto nomemory;
    Py_ssize_t longest = 0, nodes = 0;
    for (Py_ssize_t r = 0; r < s.ranks; r++) {
        PyObject *item = PyList_GET_ITEM(args[0], r);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
            PyErr_SetString(PyExc_TypeError, "numbers: a rank is (start, duration, parent, template)");
            goto done;
        }
        for (int k = 0; k < 4; k++, s.opened++)
            if (open_column(PyTuple_GET_ITEM(item, k), &s.cols[r][k]) < 0)
                goto done;
        Py_ssize_t n = s.cols[r][0].count;
        if (s.cols[r][1].count != n || s.cols[r][2].count != n || s.cols[r][3].count != n) {
            PyErr_SetString(PyExc_ValueError, "numbers: a rank's columns differ in length");
            goto done;
        }
        longest = n > longest ? n : longest;
        nodes += n;
    }
    s.busy = PyMem_Malloc((longest ? longest : 1) * 2 * sizeof *s.busy);
    s.talk = PyMem_Malloc((longest ? longest : 1) * 2 * sizeof *s.talk);
    s.coll = PyMem_Malloc((nodes ? nodes : 1) * sizeof *s.coll);
    traffic = PyMem_Calloc(row_count ? row_count : 1, sizeof *traffic);
    if (!s.busy || !s.talk || !s.coll || !traffic)
        goto nomemory;
    per_rank = PyList_New(0);
    if (!per_rank)
        goto done;
    Py_ssize_t collectives = 0;
    for (Py_ssize_t r = 0; r < s.ranks; r++) {
        int step = rank_numbers(&s, r, codes, sizes, rows, groups, waits, templates, traffic, &collectives, per_rank);
        if (step == TOO_BIG)
            goto too_big;
        if (step < 0)
            goto done;
    }
    /* the collectives by group (a counting sort: by rank and node within each), groups in the
     * order first met */
    s.first_of = PyMem_Malloc((group_count ? group_count : 1) * sizeof *s.first_of);
    s.count_of = PyMem_Calloc(group_count ? group_count : 1, sizeof *s.count_of);
    s.place = PyMem_Malloc((group_count ? group_count : 1) * sizeof *s.place);
    s.sorted = PyMem_Malloc((collectives ? collectives : 1) * sizeof *s.sorted);
    if (!s.first_of || !s.count_of || !s.place || !s.sorted)
        goto nomemory;
    for (Py_ssize_t i = collectives - 1; i >= 0; i--) {
        s.first_of[s.coll[i].group] = i;
        s.count_of[s.coll[i].group]++;
    }
    Py_ssize_t longest_run = 1;
    for (Py_ssize_t g = 0, at = 0; g < group_count; g++) {
        s.place[g] = at;
        at += s.count_of[g];
        longest_run = s.count_of[g] > longest_run ? s.count_of[g] : longest_run;
    }
    for (Py_ssize_t i = 0; i < collectives; i++)
        s.sorted[s.place[s.coll[i].group]++] = s.coll[i];
    s.first_starts = PyMem_Malloc(longest_run * sizeof(int64_t));
    s.last_starts = PyMem_Malloc(longest_run * sizeof(int64_t));
    s.last_ends = PyMem_Malloc(longest_run * sizeof(int64_t));
    s.first_sizes = PyMem_Malloc(longest_run * sizeof(int64_t));
    s.present = PyMem_Calloc(longest_run, sizeof(Py_ssize_t));
    s.last_members = PyMem_Malloc(longest_run * sizeof(Py_ssize_t));
    s.best = PyMem_Malloc((limit ? limit : 1) * sizeof *s.best + sizeof *s.best);
    if (!s.first_starts || !s.last_starts || !s.last_ends || !s.first_sizes || !s.present || !s.last_members || !s.best)
        goto nomemory;
    per_group = PyList_New(0);
    if (!per_group)
        goto done;
    for (Py_ssize_t g = 0; g < group_count; g++) {
        if (!s.count_of[g])
            continue;
        Py_ssize_t begin = s.place[g] - s.count_of[g];
        PyObject *numbers_of = group_numbers(&s, s.sorted + begin, s.count_of[g], s.first_of[g], g, sizes, (int)limit);
        if (numbers_of == Py_Ellipsis) {
            Py_DECREF(numbers_of);
            goto too_big;
        }
        if (!numbers_of || PyList_Append(per_group, numbers_of) < 0) {
            Py_XDECREF(numbers_of);
            goto done;
        }
        Py_DECREF(numbers_of);
    }
    if (PyList_Sort(per_group) < 0)  /* by the first place: the order first met */
        goto done;
    PyObject *rows_out = PyList_New(row_count);
    for (Py_ssize_t k = 0; rows_out && k < row_count; k++) {
        PyObject *row = Py_BuildValue("(LLL)", (long long)traffic[k][0], (long long)traffic[k][1],
                                      (long long)traffic[k][2]);
        if (!row)
            Py_CLEAR(rows_out);
        else
            PyList_SET_ITEM(rows_out, k, row);
    }
    if (rows_out)
        result = Py_BuildValue("(ONO)", per_rank, rows_out, per_group);
    goto done;
too_big:
    result = Py_NewRef(Py_None);
    goto done;
nomemory:
    PyErr_NoMemory();
done:
    Py_XDECREF(per_rank);
    Py_XDECREF(per_group);
    PyMem_Free(traffic);
    release(&s);
    for (int k = 0; k < tables_open; k++)
        PyBuffer_Release(&tables[k]);
    return result;
}

static PyMethodDef methods[] = {
    {"numbers", (PyCFunction)(void (*)(void))numbers, METH_FASTCALL,
     "numbers(ranks, codes, sizes, rows, groups, waits, row_count, group_count, limit): stats' numbers of a "
     "measured set's columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_stats", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__stats(void)
{
    return PyModule_Create(&module);
}
