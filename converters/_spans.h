/* Spans of time as (start, end) int64 pairs, laid out one after the other: their order and
 * their union, as scheduler/summary._merge makes it. Shared by the two optional C modules
 * that sum a rank's spans: scheduler/_loop.c (a schedule's summary) and _stats.c (`stats` of
 * a measured set's columns). Include after Python.h. */

#ifndef ET_CONVERT_SPANS_H
#define ET_CONVERT_SPANS_H

#include <stdint.h>

/* qsort's order of pairs: by start, then by end. */
static int by_start_then_end(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The union of `count` sorted pairs, in place: overlapping or touching pairs joined into one;
 * returns how many pairs are left. */
static Py_ssize_t merge_sorted_pairs(int64_t *pairs, Py_ssize_t count)
{
    Py_ssize_t merged = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        int64_t a = pairs[2 * k], b = pairs[2 * k + 1];
        if (merged && a <= pairs[2 * merged - 1]) {
            if (b > pairs[2 * merged - 1])
                pairs[2 * merged - 1] = b;
        } else {
            pairs[2 * merged] = a;
            pairs[2 * merged + 1] = b;
            merged++;
        }
    }
    return merged;
}

#endif
