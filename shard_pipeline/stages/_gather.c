/* Byte runs gathered end to end: the one copy of every text byte when a spill run or a row group is
 * put in id order (columns.ReusedBytes.join). In Python each run was a memoryview slice and a slice
 * assignment, ~3 us a run; a row group of 20 k short rows from many sections is 20 k runs. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

PyDoc_STRVAR(gather_doc,
"gather(sources, owner, start, end, out) -> bytes written\n\n"
"For each k, copy sources[owner[k]][start[k]:end[k]] to `out`, end to end. owner, start and end are\n"
"int64 buffers of one length; every run is checked against its source and `out` before any copy.");

static PyObject *gather(PyObject *self, PyObject *args) {
    PyObject *sources;
    Py_buffer owner, start, end, out;
    if (!PyArg_ParseTuple(args, "O!y*y*y*w*", &PyList_Type, &sources, &owner, &start, &end, &out)) return NULL;
    Py_ssize_t nsrc = PyList_GET_SIZE(sources), n = owner.len / 8, total = 0, got = 0;
    Py_buffer *src = PyMem_Calloc(nsrc ? nsrc : 1, sizeof(Py_buffer));
    PyObject *result = NULL;
    if (!src) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < nsrc; got++)
        if (PyObject_GetBuffer(PyList_GET_ITEM(sources, got), &src[got], PyBUF_SIMPLE) < 0) goto done;
    if (owner.len % 8 || start.len != owner.len || end.len != owner.len) {
        PyErr_SetString(PyExc_ValueError, "owner, start and end must be int64 buffers of one length");
        goto done;
    }
    const int64_t *o = owner.buf, *s = start.buf, *e = end.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (o[k] < 0 || o[k] >= nsrc || s[k] < 0 || s[k] > e[k] || e[k] > src[o[k]].len) {
            PyErr_Format(PyExc_ValueError, "run %zd is outside its source", k);
            goto done;
        }
        total += (Py_ssize_t)(e[k] - s[k]);
    }
    if (total > out.len) {
        PyErr_SetString(PyExc_ValueError, "the runs do not fit in out");
        goto done;
    }
    char *at = out.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t len = (Py_ssize_t)(e[k] - s[k]);
        memcpy(at, (const char *)src[o[k]].buf + s[k], len);
        at += len;
    }
    result = PyLong_FromSsize_t(total);
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&src[i]);
    PyMem_Free(src);
    PyBuffer_Release(&owner);
    PyBuffer_Release(&start);
    PyBuffer_Release(&end);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS, gather_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_gather", "Byte runs gathered end to end (see gather).", -1, methods, NULL, NULL, NULL, NULL,
};

#ifndef SOURCE_SHA256
#define SOURCE_SHA256 "unknown"
#endif

PyMODINIT_FUNC PyInit__gather(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
