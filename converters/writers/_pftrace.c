/* The `.pftrace` writer's loops over every event of a rank (writers/perfetto.py), in C: the
 * debug annotations of the nodes' own fields (`_Annotations.column`), the begins' bodies made
 * from their shapes' %-formats (`row_begin_bodies`), and the framing of a block of packets
 * (`_EventEncoder.frame`). A log's rank has its own node ids, sources and times, so these run
 * once per event; in Python they made the writing step a third slower than JSON's on a long
 * log (README, Performance item 27).
 *
 * The Python code is the specification and the fallback: each function here returns None for
 * what it does not take (a value of another type, an int outside 0 to 2^63 - 1, a time that
 * is not a uint64, a format with another conversion), and Python then does that work itself. tests/test_pftrace_c.py holds the two
 * to each other. Optional: without this module the writer gives the same bytes, slower. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define ANNOTATION 0x22 /* TrackEvent.debug_annotations (field 4, length-delimited) */
#define INT_VALUE 0x20  /* DebugAnnotation.int_value (field 4, varint) */
#define STRING_VALUE 0x32 /* DebugAnnotation.string_value (field 6, length-delimited) */
#define TIMESTAMP 0x40    /* TracePacket.timestamp (field 8, varint) */

static Py_ssize_t varint_size(uint64_t v)
{
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static unsigned char *put_varint(unsigned char *out, uint64_t v)
{
    while (v >= 0x80) {
        *out++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *out++ = (unsigned char)v;
    return out;
}

/* A debug annotation: its tag and length, `name_field`, then `tag` and the value (a varint, or
 * a length and `data`). `_FieldPieces.__missing__` is its specification. */
static PyObject *annotation(const char *name_field, Py_ssize_t name_size, unsigned char tag, uint64_t number,
                            const char *data, Py_ssize_t data_size)
{
    Py_ssize_t value_size = data ? varint_size((uint64_t)data_size) + data_size : varint_size(number);
    Py_ssize_t body = name_size + 1 + value_size;
    PyObject *piece = PyBytes_FromStringAndSize(NULL, 1 + varint_size((uint64_t)body) + body);
    if (!piece)
        return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(piece);
    *out++ = ANNOTATION;
    out = put_varint(out, (uint64_t)body);
    memcpy(out, name_field, name_size);
    out += name_size;
    *out++ = tag;
    if (data) {
        out = put_varint(out, (uint64_t)data_size);
        memcpy(out, data, data_size);
    } else {
        put_varint(out, number);
    }
    return piece;
}

/* The annotation of an int from 0 to 2^63 - 1 or a str; NULL with no exception set for any
 * other value (Python encodes those). */
static PyObject *encode_value(PyObject *value, const char *name_field, Py_ssize_t name_size)
{
    if (PyLong_CheckExact(value)) {
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number == -1 && PyErr_Occurred())
            return NULL;
        if (overflow || number < 0)
            return NULL;
        return annotation(name_field, name_size, INT_VALUE, (uint64_t)number, NULL, 0);
    }
    Py_ssize_t size;
    const char *data = PyUnicode_AsUTF8AndSize(value, &size);
    if (!data) { /* a lone surrogate: str.encode raises there, in Python */
        PyErr_Clear();
        return NULL;
    }
    return annotation(name_field, name_size, STRING_VALUE, 0, data, size);
}

enum outcome { DONE, DECLINED, FAILED };

/* How a function that makes the list `out` (with the b"" `empty` at hand) ends: `out` when DONE,
 * None when DECLINED (Python does the work), NULL when FAILED (the error is set). */
static PyObject *ended(PyObject *empty, PyObject *out, enum outcome how)
{
    Py_XDECREF(empty);
    if (how == DONE)
        return out;
    Py_XDECREF(out);
    if (how == DECLINED)
        Py_RETURN_NONE;
    return NULL;
}

static int item_index(PyObject *item, Py_ssize_t size, Py_ssize_t *at)
{
    Py_ssize_t i = PyLong_AsSsize_t(item);
    if (i == -1 && PyErr_Occurred())
        return -1;
    if (i < 0)
        i += size;
    if (i < 0 || i >= size) {
        PyErr_SetString(PyExc_IndexError, "annotation_pieces: a position past the column");
        return -1;
    }
    *at = i;
    return 0;
}

/* annotation_pieces(column, positions, cache, name_field): `_Annotations.column(key,
 * [column[p] for p in positions])` with `cache` the key's `_FieldPieces` and `name_field` its
 * `name_field`: the annotation of each value, b"" for None; new ones are added to `cache`. None
 * when a value is neither None, an int from 0 to 2^63 - 1 nor a str. */
static PyObject *annotation_pieces(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_Check(args[0]) || !PyList_Check(args[1]) || !PyDict_Check(args[2]) ||
        !PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "annotation_pieces(column: list, positions: list, cache: dict, name_field: bytes)");
        return NULL;
    }
    PyObject *column = args[0], *positions = args[1], *cache = args[2];
    const char *name_field = PyBytes_AS_STRING(args[3]);
    Py_ssize_t name_size = PyBytes_GET_SIZE(args[3]);
    Py_ssize_t n = PyList_GET_SIZE(positions);
    PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
    PyObject *out = PyList_New(n);
    if (!empty || !out)
        goto failed;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t at;
        if (item_index(PyList_GET_ITEM(positions, i), PyList_GET_SIZE(column), &at) < 0)
            goto failed;
        PyObject *value = PyList_GET_ITEM(column, at), *piece;
        if (value == Py_None) {
            piece = Py_NewRef(empty);
        } else if (PyLong_CheckExact(value) || PyUnicode_CheckExact(value)) {
            piece = PyDict_GetItemWithError(cache, value);
            if (piece) {
                Py_INCREF(piece);
            } else if (PyErr_Occurred()) {
                goto failed;
            } else {
                piece = encode_value(value, name_field, name_size);
                if (!piece)
                    goto declined;
                if (PyDict_SetItem(cache, value, piece) < 0) {
                    Py_DECREF(piece);
                    goto failed;
                }
            }
        } else {
            goto declined;
        }
        PyList_SET_ITEM(out, i, piece);
    }
    return ended(empty, out, DONE);
declined:
    return ended(empty, out, PyErr_Occurred() ? FAILED : DECLINED);
failed:
    return ended(empty, out, FAILED);
}

/* One %-format of `row_begin_bodies` (`shape_format`): its text with `%%` for %, `%b` for the
 * next argument, `%.0b` for an argument left out. Walks it once to measure (`out` NULL), once
 * to write. The size, or -1 for a format or arguments `%` would not take as these do. */
static Py_ssize_t fill(const char *format, Py_ssize_t size, PyObject **args, Py_ssize_t nargs, char *out)
{
    Py_ssize_t total = 0, k = 0;
    const char *end = format + size;
    while (format < end) {
        const char *percent = memchr(format, '%', end - format);
        Py_ssize_t run = (percent ? percent : end) - format;
        if (out)
            memcpy(out + total, format, run);
        total += run;
        if (!percent)
            break;
        format = percent + 1;
        if (format < end && *format == '%') {
            if (out)
                out[total] = '%';
            total++;
            format++;
        } else if (format < end && *format == 'b') {
            if (k == nargs)
                return -1;
            PyObject *arg = args[k++];
            if (out)
                memcpy(out + total, PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg));
            total += PyBytes_GET_SIZE(arg);
            format++;
        } else if (end - format >= 3 && memcmp(format, ".0b", 3) == 0) {
            if (k == nargs)
                return -1;
            k++;
            format += 3;
        } else {
            return -1;
        }
    }
    return k == nargs ? total : -1;
}

#define MAX_ARGS 32

/* format_bodies(formats, columns, names, tails): `formats[j] % (column[j] for each column,
 * names[j], tails[j])` for each j, a column None giving b"" each (`row_begin_bodies`'
 * `bodies`); every argument a bytes. None for a format or an argument this does not take. */
static PyObject *format_bodies(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_Check(args[0]) || !PyList_Check(args[1]) || !PyList_Check(args[2]) ||
        !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "format_bodies(formats: list, columns: list, names: list, tails: list)");
        return NULL;
    }
    PyObject *formats = args[0], *columns = args[1], *names = args[2], *tails = args[3];
    Py_ssize_t n = PyList_GET_SIZE(formats), width = PyList_GET_SIZE(columns) + 2;
    if (width > MAX_ARGS || PyList_GET_SIZE(names) != n || PyList_GET_SIZE(tails) != n)
        Py_RETURN_NONE;
    for (Py_ssize_t c = 0; c < width - 2; c++) {
        PyObject *column = PyList_GET_ITEM(columns, c);
        if (column != Py_None && (!PyList_Check(column) || PyList_GET_SIZE(column) != n))
            Py_RETURN_NONE;
    }
    PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
    PyObject *out = PyList_New(n);
    if (!empty || !out)
        goto failed;
    PyObject *row[MAX_ARGS];
    for (Py_ssize_t j = 0; j < n; j++) {
        for (Py_ssize_t c = 0; c < width - 2; c++) {
            PyObject *column = PyList_GET_ITEM(columns, c);
            row[c] = column == Py_None ? empty : PyList_GET_ITEM(column, j);
        }
        row[width - 2] = PyList_GET_ITEM(names, j);
        row[width - 1] = PyList_GET_ITEM(tails, j);
        PyObject *format = PyList_GET_ITEM(formats, j);
        if (!PyBytes_CheckExact(format))
            goto declined;
        for (Py_ssize_t c = 0; c < width; c++) {
            if (!PyBytes_CheckExact(row[c]))
                goto declined;
        }
        Py_ssize_t size = fill(PyBytes_AS_STRING(format), PyBytes_GET_SIZE(format), row, width, NULL);
        if (size < 0)
            goto declined;
        PyObject *body = PyBytes_FromStringAndSize(NULL, size);
        if (!body)
            goto failed;
        fill(PyBytes_AS_STRING(format), PyBytes_GET_SIZE(format), row, width, PyBytes_AS_STRING(body));
        PyList_SET_ITEM(out, j, body);
    }
    return ended(empty, out, DONE);
declined:
    return ended(empty, out, DECLINED);
failed:
    return ended(empty, out, FAILED);
}

static PyObject *item_of(PyObject *mapping, Py_ssize_t key)
{
    PyObject *k = PyLong_FromSsize_t(key);
    if (!k)
        return NULL;
    PyObject *value = PyObject_GetItem(mapping, k);
    Py_DECREF(k);
    if (value && !PyBytes_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "frame_block: a piece that is not bytes");
        Py_CLEAR(value);
    }
    return value;
}

static int int_at(PyObject *list, Py_ssize_t i, Py_ssize_t *value)
{
    *value = PyLong_AsSsize_t(PyList_GET_ITEM(list, i));
    return *value == -1 && PyErr_Occurred() ? -1 : 0;
}

/* frame_block(codes, start, stop, n, layout_slots, end_rests, bodies, sequence_event_heads,
 * packet_heads, times): `_EventEncoder.frame`'s pieces for the events from `start` to `stop`,
 * joined: per event its packet head (`packet_heads[size]`), its timestamp field (of `times`,
 * as `timestamp_fields` makes it), then an end's rest (`end_rests[slot]`) or a begin's head
 * (`sequence_event_heads[len(body)]`) and body (`bodies`, one per begin in order). None for a
 * time that is not a uint64 (Python frames those). */
static PyObject *frame_block(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10 || !PyList_Check(args[0]) || !PyList_Check(args[4]) || !PyList_Check(args[6]) ||
        !PyList_Check(args[9])) {
        PyErr_SetString(PyExc_TypeError, "frame_block(codes: list, start, stop, n, layout_slots: list, end_rests, "
                                         "bodies: list, sequence_event_heads, packet_heads, times: list)");
        return NULL;
    }
    PyObject *codes = args[0], *slots = args[4], *end_rests = args[5], *bodies = args[6], *event_heads = args[7],
             *packet_heads = args[8], *times = args[9];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), stop = PyLong_AsSsize_t(args[2]), n = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t size = PyList_GET_SIZE(codes);
    stop = stop < size ? stop : size;
    start = start < 0 ? 0 : start;
    Py_ssize_t events = stop > start ? stop - start : 0;
    if (PyList_GET_SIZE(times) < stop || n <= 0) {
        PyErr_SetString(PyExc_ValueError, "frame_block: fewer times than events, or no slots");
        return NULL;
    }
    /* per event: its packet head, then its rest in one or two pieces (new references); its time */
    PyObject **pieces = PyMem_Calloc(3 * events + 1, sizeof *pieces);
    uint64_t *stamps = PyMem_Calloc(events + 1, sizeof *stamps);
    PyObject *joined = NULL;
    Py_ssize_t total = 0, begin = 0;
    int declined = 0;
    if (!pieces || !stamps) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t e = 0; e < events; e++) {
        Py_ssize_t i = start + e, code, rest;
        if (int_at(codes, i, &code) < 0)
            goto done;
        PyObject *time = PyList_GET_ITEM(times, i);
        if (!PyLong_CheckExact(time)) {
            declined = 1;
            goto done;
        }
        stamps[e] = PyLong_AsUnsignedLongLong(time);
        if (stamps[e] == (uint64_t)-1 && PyErr_Occurred()) { /* negative or past 64 bits: Python's to frame */
            PyErr_Clear();
            declined = 1;
            goto done;
        }
        Py_ssize_t stamp_size = 1 + varint_size(stamps[e]);
        if (code < 0 || code >= 2 * n) {
            PyErr_SetString(PyExc_ValueError, "frame_block: an event code out of range");
            goto done;
        }
        if (code >= n) {
            if (begin >= PyList_GET_SIZE(bodies)) {
                PyErr_SetString(PyExc_ValueError, "frame_block: fewer bodies than begins");
                goto done;
            }
            PyObject *body = PyList_GET_ITEM(bodies, begin++);
            if (!PyBytes_Check(body)) {
                PyErr_SetString(PyExc_TypeError, "frame_block: a body that is not bytes");
                goto done;
            }
            if (!(pieces[3 * e + 1] = item_of(event_heads, PyBytes_GET_SIZE(body))))
                goto done;
            pieces[3 * e + 2] = Py_NewRef(body);
            rest = PyBytes_GET_SIZE(pieces[3 * e + 1]) + PyBytes_GET_SIZE(body);
        } else {
            Py_ssize_t slot;
            if (code >= PyList_GET_SIZE(slots)) {
                PyErr_SetString(PyExc_ValueError, "frame_block: an end past the layout's slots");
                goto done;
            }
            if (int_at(slots, code, &slot) < 0 || !(pieces[3 * e + 1] = item_of(end_rests, slot)))
                goto done;
            rest = PyBytes_GET_SIZE(pieces[3 * e + 1]);
        }
        if (!(pieces[3 * e] = item_of(packet_heads, stamp_size + rest)))
            goto done;
        total += PyBytes_GET_SIZE(pieces[3 * e]) + stamp_size + rest;
    }
    joined = PyBytes_FromStringAndSize(NULL, total);
    if (!joined)
        goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(joined);
    for (Py_ssize_t e = 0; e < events; e++) {
        memcpy(out, PyBytes_AS_STRING(pieces[3 * e]), PyBytes_GET_SIZE(pieces[3 * e]));
        out += PyBytes_GET_SIZE(pieces[3 * e]);
        *out++ = TIMESTAMP;
        out = put_varint(out, stamps[e]);
        for (int k = 1; k < 3; k++) {
            if (pieces[3 * e + k]) {
                memcpy(out, PyBytes_AS_STRING(pieces[3 * e + k]), PyBytes_GET_SIZE(pieces[3 * e + k]));
                out += PyBytes_GET_SIZE(pieces[3 * e + k]);
            }
        }
    }
done:
    if (pieces) {
        for (Py_ssize_t k = 0; k < 3 * events; k++)
            Py_XDECREF(pieces[k]);
    }
    PyMem_Free(pieces);
    PyMem_Free(stamps);
    if (declined)
        Py_RETURN_NONE;
    return joined;
}

static PyMethodDef methods[] = {
    {"annotation_pieces", (PyCFunction)(void (*)(void))annotation_pieces, METH_FASTCALL,
     "annotation_pieces(column, positions, cache, name_field): the debug annotation of each value at the "
     "positions (b\"\" for None), or None for a value of another kind."},
    {"format_bodies", (PyCFunction)(void (*)(void))format_bodies, METH_FASTCALL,
     "format_bodies(formats, columns, names, tails): each format % its row of arguments, or None."},
    {"frame_block", (PyCFunction)(void (*)(void))frame_block, METH_FASTCALL,
     "frame_block(codes, start, stop, n, layout_slots, end_rests, bodies, sequence_event_heads, packet_heads, "
     "times): a block of packets, joined; None for a time that is not a uint64."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_pftrace", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__pftrace(void)
{
    return PyModule_Create(&module);
}
