/* The head of a Chakra Node message (id, name, type, ctrl_deps, data_deps, start_time_micros),
 * read as wire.python_node_head reads it, in C: the same tuple, the same None for whatever that
 * function refuses, and the same entries added to `known`. And the loop that makes the Nodes of
 * a measured file's messages from their heads and their tails' templates, as
 * wire.python_measured_nodes does. The Python functions are the specification; these are only
 * faster (reading a measured Chakra set was mostly these two steps), and tests/test_head_c.py
 * holds each pair to each other on real and random bytes. Optional: wire.py uses the Python
 * functions when this module was not built (no C compiler at install). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define TAG_ID 0x08
#define TAG_NAME 0x12
#define TAG_TYPE 0x18
#define TAG_CTRL_DEPS 0x22
#define TAG_DATA_DEPS 0x2A
#define TAG_START 0x30
#define TAG_DURATION 0x38  /* the tail's first field */

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

static PyObject *empty_tuple, *empty_str, *init_name;

/* A head's fields; the objects are new references (NULL: the field was absent). */
struct head {
    uint64_t id, type, start;
    PyObject *name, *ctrl_deps, *data_deps;
    Py_ssize_t tail_at;  /* where the tail starts */
};

static void release_head(struct head *h)
{
    Py_CLEAR(h->name);
    Py_CLEAR(h->ctrl_deps);
    Py_CLEAR(h->data_deps);
}

/* The head of the message b[0:size] into *h: OK, REFUSED (nothing held) or FAILED. */
static int read_head(const uint8_t *b, Py_ssize_t size, PyObject *known, struct head *h)
{
    Py_ssize_t pos = 0;
    int step = OK;
    *h = (struct head){0};

    /* Each field is optional and in number order; `pos == size` before a tag ends the head. A
     * step moves `pos` past its field only when it is OK: a refused head reads no further. */
    if (pos < size && b[pos] == TAG_ID) {
        pos += 1;
        if ((step = canonical_varint(b, size, &pos, &h->id)) != OK)
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
        h->name = PyUnicode_DecodeUTF8((const char *)b + pos + 2, length, NULL);
        if (!h->name) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                return FAILED;
            PyErr_Clear();
            goto refused;
        }
        pos += 2 + length;
    }
    if (pos < size && b[pos] == TAG_TYPE) {
        if (pos + 1 >= size)
            goto refused;
        h->type = b[pos + 1];
        if (!(0 < h->type && h->type < 0x80))
            goto refused;
        pos += 2;
    }
    if (pos < size && b[pos] == TAG_CTRL_DEPS) {
        pos += 1;
        if ((step = packed(b, size, &pos, known, &h->ctrl_deps)) != OK)
            goto refused;
    }
    if (pos < size && b[pos] == TAG_DATA_DEPS) {
        pos += 1;
        if ((step = packed(b, size, &pos, known, &h->data_deps)) != OK)
            goto refused;
    }
    if (pos < size && b[pos] == TAG_START) {
        pos += 1;
        if ((step = canonical_varint(b, size, &pos, &h->start)) != OK)
            goto refused;
    }
    /* A dependency list found in `known` by a slice cut short by the end leaves pos past it:
     * python_node_head refuses that when it next looks at a byte. */
    if (pos > size)
        goto refused;
    h->tail_at = pos;
    return OK;

refused:
    release_head(h);
    return step == FAILED ? FAILED : REFUSED;
}

static PyObject *node_head(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "node_head(body: bytes, known: dict)");
        return NULL;
    }
    struct head h;
    int step = read_head((const uint8_t *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), args[1], &h);
    if (step == FAILED)
        return NULL;
    if (step == REFUSED)
        Py_RETURN_NONE;
    PyObject *values[7] = {PyLong_FromUnsignedLongLong(h.id), h.name ? h.name : Py_NewRef(empty_str),
                           PyLong_FromUnsignedLongLong(h.type), h.ctrl_deps ? h.ctrl_deps : Py_NewRef(empty_tuple),
                           h.data_deps ? h.data_deps : Py_NewRef(empty_tuple), PyLong_FromUnsignedLongLong(h.start),
                           PyLong_FromSsize_t(h.tail_at)};
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
}

/* Positions in a Node's arguments (model.Node's fields in order; readers/chakra.py checks them)
 * of what each message gives; the rest come from the tail's template. */
enum {
    ARG_ID = 0, ARG_NAME = 1, ARG_DURATION = 3, ARG_DEPS = 4, ARG_CTRL_DEPS = 5, ARG_START = 11, ARG_ARGS = 16,
    ARG_COUNT = 20
};

/* micros * 1000 as a Python int (past 64 bits as Python multiplies). */
static PyObject *nanoseconds(uint64_t micros)
{
    if (micros <= UINT64_MAX / 1000)
        return PyLong_FromUnsignedLongLong(micros * 1000);
    PyObject *value = PyLong_FromUnsignedLongLong(micros), *thousand = PyLong_FromLong(1000);
    PyObject *product = value && thousand ? PyNumber_Multiply(value, thousand) : NULL;
    Py_XDECREF(value);
    Py_XDECREF(thousand);
    return product;
}

/* Making `make(*arguments)` without calling it, when `make` is a dataclass whose __init__ does
 * nothing but store its arguments in its fields, in order, and each field is a slot (model.Node):
 * the object is allocated and the arguments stored at the slots' offsets, as that __init__
 * would (most of a measured node's cost was the call). Such a class has dataclass's __init__
 * (params.init, and an __init__ compiled from text as dataclasses makes it, not one written in
 * a file or put in later), no __post_init__, only fields that __init__ takes by position (all
 * its fields are in __match_args__), and object's __new__. Whatever fails these checks is
 * called, so a dataclasses module that made its __init__ otherwise would cost only speed.
 * tests/test_head_c.py holds the nodes made so to Node(*arguments), and `fills` to which
 * classes pass. The plan is found once and found again when the class changes (its version
 * tag: CPython sets it to 0 then). */
static struct {
    PyTypeObject *type;  /* strong reference; NULL: no plan */
    unsigned int version;
    Py_ssize_t offsets[ARG_COUNT];
} fill;

/* obj.name into *out, or NULL when obj has no such attribute: 0; -1 on another error. */
static int optional_attr(PyObject *obj, const char *name, PyObject **out)
{
    *out = PyObject_GetAttrString(obj, name);
    if (*out || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return *out ? 0 : -1;
    PyErr_Clear();
    return 0;
}

/* Whether the class's __init__ is a function compiled from text (dataclasses' way). */
static int generated_init(PyTypeObject *type)
{
    PyObject *init = _PyType_Lookup(type, init_name);  /* borrowed */
    if (!init || !PyFunction_Check(init))
        return 0;
    PyObject *file = ((PyCodeObject *)PyFunction_GET_CODE(init))->co_filename;
    return PyUnicode_Check(file) && PyUnicode_CompareWithASCIIString(file, "<string>") == 0;
}

/* 1 when `make`'s objects can be made by filling their slots (the plan in `fill`), 0 when
 * `make` must be called, -1 on a Python error. */
static int fill_plan(PyObject *make)
{
    if (fill.type == (PyTypeObject *)make && fill.version && fill.type->tp_version_tag == fill.version)
        return 1;
    Py_CLEAR(fill.type);
    if (!PyType_Check(make) || ((PyTypeObject *)make)->tp_new != PyBaseObject_Type.tp_new)
        return 0;
    PyTypeObject *type = (PyTypeObject *)make;
    PyObject *params = NULL, *init = NULL, *fields = NULL, *positional = NULL;
    int usable = 0;
    if (optional_attr(make, "__dataclass_params__", &params) < 0 ||
        (params && optional_attr(params, "init", &init) < 0) ||
        optional_attr(make, "__dataclass_fields__", &fields) < 0 ||
        optional_attr(make, "__match_args__", &positional) < 0)
        goto done;
    usable = init && PyObject_IsTrue(init) == 1 && generated_init(type) && fields && PyDict_Check(fields) &&
             PyDict_GET_SIZE(fields) == ARG_COUNT && positional && PyTuple_Check(positional) &&
             PyTuple_GET_SIZE(positional) == ARG_COUNT && !PyObject_HasAttrString(make, "__post_init__") &&
             !PyErr_Occurred();
    for (Py_ssize_t k = 0; usable && k < ARG_COUNT; k++) {
        PyObject *name = PyTuple_GET_ITEM(positional, k);
        PyObject *slot = PyUnicode_Check(name) ? _PyType_Lookup(type, name) : NULL;  /* borrowed */
        PyMemberDef *member = slot && Py_IS_TYPE(slot, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)slot)->d_member
                                                                             : NULL;
        usable = member && member->type == T_OBJECT_EX && !(member->flags & READONLY) &&
                 PyType_IsSubtype(type, PyDescr_TYPE(slot));
        if (usable)
            fill.offsets[k] = member->offset;
    }
    if (usable && type->tp_version_tag) {  /* _PyType_Lookup gave the class a tag */
        fill.type = (PyTypeObject *)Py_NewRef(make);
        fill.version = type->tp_version_tag;
    } else {
        usable = 0;
    }
done:
    Py_XDECREF(params);
    Py_XDECREF(init);
    Py_XDECREF(fields);
    Py_XDECREF(positional);
    return PyErr_Occurred() ? -1 : usable;
}

/* `fill.type`'s object with the arguments stored in its slots (fill_plan said it can be). */
static PyObject *filled(PyObject *const *arguments)
{
    PyObject *made = fill.type->tp_alloc(fill.type, 0);
    if (made)
        for (int k = 0; k < ARG_COUNT; k++)
            *(PyObject **)((char *)made + fill.offsets[k]) = Py_NewRef(arguments[k]);
    return made;
}

/* One measured message's Node appended to `nodes`: OK, REFUSED (a head or tail that
 * wire.measured_node would not take; nothing appended) or FAILED. */
static int measured_node(const uint8_t *body, Py_ssize_t size, PyObject *known, PyObject *args_of,
                         PyObject *make, int fills, PyObject *names, PyObject *nodes)
{
    struct head h;
    int step = read_head(body, size, known, &h);
    if (step != OK)
        return step;
    if (!h.start) {
        release_head(&h);
        return REFUSED;
    }
    /* the tail's template is found by what follows its duration (as wire.leading_duration reads it) */
    Py_ssize_t rest_at = h.tail_at;
    uint64_t micros = 0;
    if (rest_at < size && body[rest_at] == TAG_DURATION) {
        Py_ssize_t at = rest_at + 1;
        if (canonical_varint(body, size, &at, &micros) == OK)
            rest_at = at;
    }
    PyObject *key = PyTuple_New(2);
    if (key) {
        PyTuple_SET_ITEM(key, 0, PyLong_FromUnsignedLongLong(h.type));
        PyTuple_SET_ITEM(key, 1, PyBytes_FromStringAndSize((const char *)body + rest_at, size - rest_at));
        if (!PyTuple_GET_ITEM(key, 0) || !PyTuple_GET_ITEM(key, 1))
            Py_CLEAR(key);
    }
    PyObject *template = key ? PyDict_GetItemWithError(args_of, key) : NULL;  /* borrowed */
    Py_XDECREF(key);
    if (!template || !PyTuple_CheckExact(template) || PyTuple_GET_SIZE(template) != ARG_COUNT) {
        release_head(&h);
        return PyErr_Occurred() ? FAILED : REFUSED;  /* a tail not seen yet, or None: unusable */
    }
    Py_INCREF(template);  /* held while `make` runs Python code */
    PyObject *name = h.name ? h.name : Py_NewRef(empty_str);
    PyObject *interned = PyDict_SetDefault(names, name, name);  /* one str per distinct name */
    Py_XINCREF(interned);
    Py_DECREF(name);
    enum { OWNED = 7 };
    PyObject *owned[OWNED] = {
        PyLong_FromUnsignedLongLong(h.id),
        interned,
        nanoseconds(micros),
        PySequence_List(h.data_deps ? h.data_deps : empty_tuple),
        PySequence_List(h.ctrl_deps ? h.ctrl_deps : empty_tuple),
        nanoseconds(h.start),
        /* the template's args (a set et-convert wrote gives some nodes args back), each node its own */
        PyDict_CheckExact(PyTuple_GET_ITEM(template, ARG_ARGS)) ? PyDict_Copy(PyTuple_GET_ITEM(template, ARG_ARGS))
                                                                : PyDict_New(),
    };
    Py_CLEAR(h.ctrl_deps);
    Py_CLEAR(h.data_deps);
    PyObject *node = NULL;
    int made = 1;
    for (int k = 0; k < OWNED; k++)
        made = made && owned[k];
    if (made) {
        PyObject *call[ARG_COUNT];
        for (int k = 0; k < ARG_COUNT; k++)
            call[k] = PyTuple_GET_ITEM(template, k);
        call[ARG_ID] = owned[0];
        call[ARG_NAME] = owned[1];
        call[ARG_DURATION] = owned[2];
        call[ARG_DEPS] = owned[3];
        call[ARG_CTRL_DEPS] = owned[4];
        call[ARG_START] = owned[5];
        call[ARG_ARGS] = owned[6];
        node = fills ? filled(call) : PyObject_Vectorcall(make, call, ARG_COUNT, NULL);
    }
    for (int k = 0; k < OWNED; k++)
        Py_XDECREF(owned[k]);
    Py_DECREF(template);
    if (!node)
        return FAILED;
    int appended = PyList_Append(nodes, node);
    Py_DECREF(node);
    return appended < 0 ? FAILED : OK;
}

/* A loop's start position from Python: 0 and *pos set, or -1 with an exception. */
static int start_position(PyObject *arg, const char *loop, Py_ssize_t *pos)
{
    *pos = PyLong_AsSsize_t(arg);
    if (*pos == -1 && PyErr_Occurred())
        return -1;
    if (*pos < 0) {
        PyErr_Format(PyExc_ValueError, "%s: negative position", loop);
        return -1;
    }
    return 0;
}

/* The message framed at data[pos], as wire.short_frame takes it (a length prefix of one or two
 * bytes: messages below 16 KiB, all there): 1 with where its body starts and its length, else 0. */
static int short_frame(const uint8_t *data, Py_ssize_t size, Py_ssize_t pos, Py_ssize_t *at, Py_ssize_t *length)
{
    *at = pos + 1;
    *length = data[pos];
    if (*length >= 0x80) {
        if (*at >= size || data[*at] >= 0x80)
            return 0;
        *length = (*length & 0x7F) | (Py_ssize_t)data[*at] << 7;
        *at += 1;
    }
    return *length <= size - *at;
}

/* wire.python_measured_nodes in C: the Nodes of the messages from data[pos] on, appended to
 * `nodes`, up to the end or the first message it does not take; returns where it stopped. */
static PyObject *measured_nodes(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1]) || !PyDict_Check(args[2]) ||
        !PyDict_Check(args[3]) || !PyCallable_Check(args[4]) || !PyDict_Check(args[5]) || !PyList_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "measured_nodes(data: bytes, pos: int, known: dict, args_of: dict, make, names: dict, "
                        "nodes: list)");
        return NULL;
    }
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]), pos, at, length;
    if (start_position(args[1], "measured_nodes", &pos) < 0)
        return NULL;
    int fills = fill_plan(args[4]);
    if (fills < 0)
        return NULL;
    while (pos < size && short_frame(data, size, pos, &at, &length)) {
        int step = measured_node(data + at, length, args[2], args[3], args[4], fills, args[5], args[6]);
        if (step == FAILED)
            return NULL;
        if (step == REFUSED)
            break;
        pos = at + length;
    }
    return PyLong_FromSsize_t(pos);
}

/* -- a measured file's nodes as columns (wire.python_measured_columns) ------------------------ */

/* A head as read_head accepts it, read for its type and start only: nothing is made (a name is
 * checked to be UTF-8, a dependency list to be packed varints). OK or REFUSED. */
static int scan_head(const uint8_t *b, Py_ssize_t size, uint64_t *type, uint64_t *start, Py_ssize_t *tail_at)
{
    Py_ssize_t pos = 0;
    uint64_t ignored;
    *type = *start = 0;
    if (pos < size && b[pos] == TAG_ID) {
        pos += 1;
        if (canonical_varint(b, size, &pos, &ignored) != OK)
            return REFUSED;
    }
    if (pos < size && b[pos] == TAG_NAME) {
        if (pos + 1 >= size)
            return REFUSED;
        Py_ssize_t length = b[pos + 1];
        if (!(0 < length && length < 0x80) || pos + 2 + length > size)
            return REFUSED;
        const uint8_t *name = b + pos + 2;
        int ascii = 1;
        for (Py_ssize_t k = 0; k < length && ascii; k++)
            ascii = name[k] < 0x80;
        if (!ascii) {  /* rare: let Python's decoder say whether it is UTF-8 */
            PyObject *text = PyUnicode_DecodeUTF8((const char *)name, length, NULL);
            if (!text) {
                PyErr_Clear();
                return REFUSED;
            }
            Py_DECREF(text);
        }
        pos += 2 + length;
    }
    if (pos < size && b[pos] == TAG_TYPE) {
        if (pos + 1 >= size || !(0 < b[pos + 1] && b[pos + 1] < 0x80))
            return REFUSED;
        *type = b[pos + 1];
        pos += 2;
    }
    static const uint8_t dependency_tags[] = {TAG_CTRL_DEPS, TAG_DATA_DEPS};
    for (int k = 0; k < 2; k++) {
        if (!(pos < size && b[pos] == dependency_tags[k]))
            continue;
        /* packed varints in a one-byte length, each in its shortest form (as `packed`) */
        if (pos + 1 >= size || !(0 < b[pos + 1] && b[pos + 1] < 0x80) || pos + 2 + b[pos + 1] > size)
            return REFUSED;
        Py_ssize_t at = pos + 2, end = pos + 2 + b[pos + 1];
        while (at < end) {
            if (b[at] < 0x80)
                at += 1;
            else if (canonical_varint(b, end, &at, &ignored) != OK)
                return REFUSED;
        }
        pos = end;
    }
    if (pos < size && b[pos] == TAG_START) {
        pos += 1;
        if (canonical_varint(b, size, &pos, start) != OK)
            return REFUSED;
    }
    *tail_at = pos;
    return OK;
}

#define TAG_ATTR 0x52
static const uint8_t PARENT_ATTR[] = {0x0a, 0x06, 'p', 'a', 'r', 'e', 'n', 't', 0x48};

/* wire.parent_value of the attribute b[0:size] (its tag and length included): 1 with *value
 * set when it is exactly `parent` as an int64_val, else 0. */
static int parent_value(const uint8_t *b, Py_ssize_t size, uint64_t *value)
{
    Py_ssize_t at = 2 + (Py_ssize_t)sizeof PARENT_ATTR;  /* the value */
    if (size <= at || memcmp(b + 2, PARENT_ATTR, sizeof PARENT_ATTR) != 0)
        return 0;
    if (size == at + 1 && b[at] == 0) {
        *value = 0;
        return 1;
    }
    return canonical_varint(b, size, &at, value) == OK && at == size;
}

/* Growing a bytearray by one native int64. */
static int append_int64(PyObject *column, int64_t value)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(column);
    if (PyByteArray_Resize(column, size + (Py_ssize_t)sizeof value) < 0)
        return -1;
    memcpy(PyByteArray_AS_STRING(column) + size, &value, sizeof value);
    return 0;
}

/* measured_columns(data, pos, keys, *columns): wire.python_measured_columns, in C. The key of
 * the message before is kept: messages of one step mostly share their tail, so its bytes are
 * compared instead of looked up. */
static PyObject *measured_columns(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    enum { COLUMNS = 5 };
    int usable = nargs == 3 + COLUMNS && PyBytes_Check(args[0]) && PyLong_Check(args[1]) && PyDict_Check(args[2]);
    for (Py_ssize_t k = 3; usable && k < nargs; k++)
        usable = PyByteArray_CheckExact(args[k]);
    if (!usable) {
        PyErr_SetString(PyExc_TypeError, "measured_columns(data: bytes, pos: int, keys: dict, *five bytearrays)");
        return NULL;
    }
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]), pos, at, length;
    if (start_position(args[1], "measured_columns", &pos) < 0)
        return NULL;
    Py_ssize_t last_size = -1, capacity = 256;
    uint8_t *rest = PyMem_Malloc(capacity), *last = PyMem_Malloc(capacity);  /* this message's key tail, the last found */
    if (!rest || !last) {
        PyMem_Free(rest);
        PyMem_Free(last);
        return PyErr_NoMemory();
    }
    uint64_t last_type = 0;
    int64_t last_template = 0;
    PyObject *missing = NULL;  /* the key without a template, when the loop stopped at one */
    int failed = 0;
    while (pos < size && short_frame(data, size, pos, &at, &length)) {
        const uint8_t *body = data + at;
        uint64_t type, start, micros = 0, parent = 0;
        Py_ssize_t tail_at;
        if (scan_head(body, length, &type, &start, &tail_at) != OK)
            break;
        Py_ssize_t p = tail_at;
        if (p < length && body[p] == TAG_DURATION) {
            p += 1;
            if (canonical_varint(body, length, &p, &micros) != OK)
                break;
        }
        if (length - p > capacity) {
            capacity = 2 * (length - p);
            uint8_t *grown = PyMem_Realloc(rest, capacity), *grown_last = grown ? PyMem_Realloc(last, capacity) : NULL;
            if (grown)
                rest = grown;
            if (grown_last)
                last = grown_last;
            if (!grown || !grown_last) {
                PyErr_NoMemory();
                failed = 1;
                break;
            }
        }
        Py_ssize_t rest_size = 0;
        int parents = 0, refused = 0;
        while (p < length && !refused) {
            refused = body[p] != TAG_ATTR || p + 1 == length || body[p + 1] >= 0x80 || p + 2 + body[p + 1] > length;
            if (refused)
                break;
            Py_ssize_t end = p + 2 + body[p + 1];
            if (parent_value(body + p, end - p, &parent)) {
                refused = parents++ > 0;
            } else {
                memcpy(rest + rest_size, body + p, end - p);
                rest_size += end - p;
            }
            p = end;
        }
        if (refused || start > INT64_MAX / 1000 || micros > INT64_MAX / 1000)
            break;
        if (!(type == last_type && rest_size == last_size && memcmp(rest, last, rest_size) == 0)) {
            PyObject *key = Py_BuildValue("(Ky#)", (unsigned long long)type, (const char *)rest, rest_size);
            PyObject *found = key ? PyDict_GetItemWithError(args[2], key) : NULL;  /* borrowed */
            if (!found) {
                failed = PyErr_Occurred() != NULL;
                missing = failed ? NULL : key;
                if (failed)
                    Py_XDECREF(key);
                break;
            }
            Py_DECREF(key);
            last_template = PyLong_AsLongLong(found);
            if (last_template == -1 && PyErr_Occurred()) {
                failed = 1;
                break;
            }
            memcpy(last, rest, rest_size);
            last_size = rest_size, last_type = type;
        }
        int64_t values[COLUMNS] = {(int64_t)start * 1000, (int64_t)micros * 1000, parents ? (int64_t)parent : -1,
                                   last_template, pos};
        for (int k = 0; k < COLUMNS && !failed; k++)
            failed = append_int64(args[3 + k], values[k]) < 0;
        if (failed)
            break;
        pos = at + length;
    }
    PyMem_Free(rest);
    PyMem_Free(last);
    if (failed)
        return NULL;
    PyObject *where = PyLong_FromSsize_t(pos);
    PyObject *result = where ? PyTuple_Pack(2, where, missing ? missing : Py_None) : NULL;
    Py_XDECREF(where);
    Py_XDECREF(missing);
    return result;
}

/* fills(make): whether measured_nodes makes `make`'s objects by filling their slots (tests). */
static PyObject *fills(PyObject *Py_UNUSED(module), PyObject *make)
{
    int plan = fill_plan(make);
    return plan < 0 ? NULL : PyBool_FromLong(plan);
}

static PyMethodDef methods[] = {
    {"node_head", (PyCFunction)(void (*)(void))node_head, METH_FASTCALL,
     "node_head(body, known): wire.python_node_head, in C."},
    {"measured_nodes", (PyCFunction)(void (*)(void))measured_nodes, METH_FASTCALL,
     "measured_nodes(data, pos, known, args_of, make, names, nodes): wire.python_measured_nodes, in C."},
    {"measured_columns", (PyCFunction)(void (*)(void))measured_columns, METH_FASTCALL,
     "measured_columns(data, pos, keys, *columns): wire.python_measured_columns, in C."},
    {"fills", fills, METH_O, "fills(make): whether measured_nodes fills make's slots instead of calling it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_head", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__head(void)
{
    empty_tuple = PyTuple_New(0);
    empty_str = PyUnicode_FromStringAndSize("", 0);
    init_name = PyUnicode_InternFromString("__init__");
    if (!empty_tuple || !empty_str || !init_name)
        return NULL;
    return PyModule_Create(&module);
}
