/* The head of a Chakra Node message (id, name, type, ctrl_deps, data_deps, start_time_micros),
 * read as wire.python_node_head reads it, in C: the same tuple, the same None for whatever that
 * function refuses, and the same entries added to `known`. The Python function is the
 * specification; this is only faster (about a third of reading a measured Chakra set was spent
 * there), and tests/test_head_c.py holds the two to each other on real and random bytes.
 * Optional: wire.py uses the Python function when this module was not built (no C compiler at
 * install). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define TAG_ID 0x08
#define TAG_NAME 0x12
#define TAG_TYPE 0x18
#define TAG_CTRL_DEPS 0x22
#define TAG_DATA_DEPS 0x2A
#define TAG_START 0x30

/* What a step found: the message goes on, the head was refused (None: an unusual field, or its
 * bytes ran out inside it; python_node_head accepts the end of the bytes only before a tag,
 * which the `pos < size` tests below stand for), or Python raised (out of memory). */
enum { OK = 0, REFUSED = 1, FAILED = 2 /* a Python exception is set */ };

/* A varint in its shortest form, at most 9 bytes (63 bits) and not 0, as wire._canonical_varint
 * takes it. */
static int canonical_varint(const uint8_t *b, Py_ssize_t size, Py_ssize_t *pos, uint64_t *out)
{
    Py_ssize_t at = *pos;
    if (at >= size)
        return REFUSED;
    uint8_t x = b[at];
    if (x < 0x80) {
        if (!x)
            return REFUSED;
        *out = x;
        *pos = at + 1;
        return OK;
    }
    uint64_t value = x & 0x7F;
    for (int shift = 7;; shift += 7) {
        if (++at >= size)
            return REFUSED;
        x = b[at];
        if (shift > 56)  /* a tenth byte: beyond 63 bits whatever it holds */
            return REFUSED;
        value |= (uint64_t)(x & 0x7F) << shift;
        if (x < 0x80) {
            if (!x)
                return REFUSED;
            *out = value;
            *pos = at + 1;
            return OK;
        }
    }
}

/* The packed varints of a field whose one-byte length is at *pos, as wire._packed reads them:
 * found in `known` by their bytes, else read and added to it. */
static int packed(const uint8_t *b, Py_ssize_t size, Py_ssize_t *pos, PyObject *known, PyObject **out)
{
    Py_ssize_t at = *pos;
    if (at >= size)
        return REFUSED;
    Py_ssize_t length = b[at];
    if (!(0 < length && length < 0x80))
        return REFUSED;
    at += 1;
    Py_ssize_t end = at + length;
    Py_ssize_t key_end = end < size ? end : size;  /* a slice past the end stops at it */
    PyObject *key = PyBytes_FromStringAndSize((const char *)b + at, key_end - at);
    if (!key)
        return FAILED;
    PyObject *found = PyDict_GetItemWithError(known, key);
    if (found) {
        Py_DECREF(key);
        Py_INCREF(found);
        *out = found;
        *pos = end;
        return OK;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return FAILED;
    }
    /* at most `length` values: one byte at least each */
    uint64_t values[0x80];
    Py_ssize_t count = 0;
    while (at < end) {
        if (at >= size) {
            Py_DECREF(key);
            return REFUSED;
        }
        uint8_t x = b[at];
        if (x < 0x80) {
            values[count++] = x;
            at += 1;
        } else {
            int step = canonical_varint(b, size, &at, &values[count]);
            if (step != OK) {
                Py_DECREF(key);
                return step;
            }
            count += 1;
        }
    }
    if (at != end) {  /* a varint ran past the field */
        Py_DECREF(key);
        return REFUSED;
    }
    PyObject *tuple = PyTuple_New(count);
    if (!tuple) {
        Py_DECREF(key);
        return FAILED;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *value = PyLong_FromUnsignedLongLong(values[k]);
        if (!value) {
            Py_DECREF(tuple);
            Py_DECREF(key);
            return FAILED;
        }
        PyTuple_SET_ITEM(tuple, k, value);
    }
    int stored = PyDict_SetItem(known, key, tuple);
    Py_DECREF(key);
    if (stored < 0) {
        Py_DECREF(tuple);
        return FAILED;
    }
    *out = tuple;
    *pos = at;
    return OK;
}

static PyObject *empty_tuple, *empty_str;

static PyObject *node_head(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "node_head(body: bytes, known: dict)");
        return NULL;
    }
    const uint8_t *b = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    PyObject *known = args[1];
    Py_ssize_t pos = 0;
    uint64_t node_id = 0, node_type = 0, start = 0;
    PyObject *name = NULL, *ctrl_deps = NULL, *data_deps = NULL;
    int step = OK;

    /* Each field is optional and in number order; `pos == size` before a tag ends the head. A
     * step moves `pos` past its field only when it is OK: a refused head reads no further. */
    if (pos < size && b[pos] == TAG_ID) {
        pos += 1;
        if ((step = canonical_varint(b, size, &pos, &node_id)) != OK)
            goto refused;
    }
    if (pos < size && b[pos] == TAG_NAME) {
        if (pos + 1 >= size)
            goto refused;
        Py_ssize_t length = b[pos + 1];
        if (!(0 < length && length < 0x80))
            goto refused;
        if (pos + 2 + length > size)
            goto refused;
        name = PyUnicode_DecodeUTF8((const char *)b + pos + 2, length, NULL);
        if (!name) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                return NULL;
            PyErr_Clear();
            goto refused;
        }
        pos += 2 + length;
    }
    if (pos < size && b[pos] == TAG_TYPE) {
        if (pos + 1 >= size)
            goto refused;
        node_type = b[pos + 1];
        if (!(0 < node_type && node_type < 0x80))
            goto refused;
        pos += 2;
    }
    if (pos < size && b[pos] == TAG_CTRL_DEPS) {
        pos += 1;
        if ((step = packed(b, size, &pos, known, &ctrl_deps)) != OK)
            goto refused;
    }
    if (pos < size && b[pos] == TAG_DATA_DEPS) {
        pos += 1;
        if ((step = packed(b, size, &pos, known, &data_deps)) != OK)
            goto refused;
    }
    if (pos < size && b[pos] == TAG_START) {
        pos += 1;
        if ((step = canonical_varint(b, size, &pos, &start)) != OK)
            goto refused;
    }
    /* A dependency list found in `known` by a slice cut short by the end leaves pos past it:
     * python_node_head refuses that when it next looks at a byte. */
    if (pos > size)
        goto refused;
    PyObject *values[7] = {PyLong_FromUnsignedLongLong(node_id), name ? name : Py_NewRef(empty_str),
                           PyLong_FromUnsignedLongLong(node_type), ctrl_deps ? ctrl_deps : Py_NewRef(empty_tuple),
                           data_deps ? data_deps : Py_NewRef(empty_tuple), PyLong_FromUnsignedLongLong(start),
                           PyLong_FromSsize_t(pos)};
    PyObject *head = PyTuple_New(7);
    for (int k = 0; k < 7; k++) {  /* the tuple takes our references; an int not made: out of memory */
        if (!values[k])
            Py_CLEAR(head);
        if (head)
            PyTuple_SET_ITEM(head, k, values[k]);
        else
            Py_XDECREF(values[k]);
    }
    return head;

refused:
    Py_XDECREF(name);
    Py_XDECREF(ctrl_deps);
    Py_XDECREF(data_deps);
    if (step == FAILED)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"node_head", (PyCFunction)(void (*)(void))node_head, METH_FASTCALL,
     "node_head(body, known): wire.python_node_head, in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_head", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__head(void)
{
    empty_tuple = PyTuple_New(0);
    empty_str = PyUnicode_FromStringAndSize("", 0);
    if (!empty_tuple || !empty_str)
        return NULL;
    return PyModule_Create(&module);
}
