/* The compiled fast path of torch_dipu's dispatcher (optional; torch_dipu.dispatch keeps the Python path).

A FastHandler runs the common case of an ATen overload's handler in C: positional arguments only, the first
a dipu tensor, no host tensor where the overload forbids one, one device; it unwraps the dipu tensors to
their storage tensors, calls the overload, accounts a new output storage with the allocator and wraps the
output. Every other call goes to the Python handler it was built with, which stays the definition of what a
call does.  Only the Python C API is used (no PyTorch headers): the tensors are handled through their
Python methods, exactly as the Python handler does.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

static PyTypeObject *dipu_type = NULL;   /* torch_dipu.tensor.DipuTensor */
static PyTypeObject *tensor_type = NULL; /* torch.Tensor */
static PyObject *make_wrapper = NULL;    /* torch.Tensor._make_wrapper_subclass */
static PyObject *strided = NULL;         /* torch.strided */
static PyObject *make_view = NULL;       /* torch_dipu.dispatch._make_view (conjugate/negative views) */

static PyObject *s_raw, *s_device, *s_index, *s_shape, *s_dtype, *s_stride, *s_storage_offset,
    *s_is_contiguous, *s_is_conj, *s_is_neg, *s_several_devices;

typedef struct {
    PyObject_HEAD
    PyObject *op;      /* the overload's C++ callable (OpOverload._op) */
    PyObject *slow;    /* the Python handler: handler(args, kwargs) */
    PyObject *track;   /* the allocator's track(raw, index) */
    PyObject *wrap;    /* wrap(out, device) for outputs that are not one tensor */
    PyObject *state;   /* the device state (several_devices) */
    PyObject *ranged;  /* None, or the profiler's "enabled" flag function: while it answers True, the Python
                          handler runs the kernel inside its profiler range */
    int is_view;
    int check_host;
    vectorcallfunc vectorcall;
} FastHandler;

static PyObject *call_slow(FastHandler *self, PyObject *args, PyObject *kwargs) {
    PyObject *pair[2] = {args, kwargs};
    return PyObject_Vectorcall(self->slow, pair, 2, NULL);
}

static PyObject *wrap_one(FastHandler *self, PyObject *raw, PyObject *device) {
    if (self->is_view) {
        PyObject *flag = PyObject_CallMethodNoArgs(raw, s_is_conj);
        if (flag == NULL) return NULL;
        int special = PyObject_IsTrue(flag);
        Py_DECREF(flag);
        if (!special) {
            flag = PyObject_CallMethodNoArgs(raw, s_is_neg);
            if (flag == NULL) return NULL;
            special = PyObject_IsTrue(flag);
            Py_DECREF(flag);
        }
        if (special < 0) return NULL;
        if (special) {
            PyObject *pair[2] = {raw, device};
            return PyObject_Vectorcall(make_view, pair, 2, NULL);
        }
    }
    PyObject *shape = NULL, *dtype = NULL, *stride = Py_None, *offset = Py_None, *wrapper = NULL;
    PyObject *contiguous = PyObject_CallMethodNoArgs(raw, s_is_contiguous);
    if (contiguous == NULL) return NULL;
    PyObject *start = PyObject_CallMethodNoArgs(raw, s_storage_offset);
    if (start == NULL) { Py_DECREF(contiguous); return NULL; }
    int plain = contiguous == Py_True && PyLong_Check(start) && PyLong_AsSsize_t(start) == 0;
    Py_DECREF(contiguous);
    if (!plain) {
        stride = PyObject_CallMethodNoArgs(raw, s_stride);
        if (stride == NULL) { Py_DECREF(start); return NULL; }
        offset = start;
    } else {
        Py_DECREF(start);
        Py_INCREF(stride);
        Py_INCREF(offset);
    }
    shape = PyObject_GetAttr(raw, s_shape);
    if (shape == NULL) goto done;
    dtype = PyObject_GetAttr(raw, s_dtype);
    if (dtype == NULL) goto done;
    {
        PyObject *argv[8] = {(PyObject *)dipu_type, shape, stride, offset, Py_None, dtype, strided, device};
        wrapper = PyObject_Vectorcall(make_wrapper, argv, 8, NULL);
    }
    if (wrapper != NULL && PyObject_SetAttr(wrapper, s_raw, raw) < 0) Py_CLEAR(wrapper);
done:
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    Py_DECREF(stride);
    Py_DECREF(offset);
    return wrapper;
}

static PyObject *fast_call(PyObject *obj, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    FastHandler *self = (FastHandler *)obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || kwnames != NULL || !PyTuple_CheckExact(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "FastHandler(args: tuple, kwargs: dict | None)");
        return NULL;
    }
    PyObject *args = argv[0], *kwargs = argv[1];
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n == 0 || Py_TYPE(PyTuple_GET_ITEM(args, 0)) != dipu_type ||
        (kwargs != Py_None && (!PyDict_Check(kwargs) || PyDict_GET_SIZE(kwargs) != 0)))
        return call_slow(self, args, kwargs);
    if (self->ranged != Py_None) {
        PyObject *on = PyObject_CallNoArgs(self->ranged);
        if (on == NULL) return NULL;
        int recording = PyObject_IsTrue(on);
        Py_DECREF(on);
        if (recording) return recording < 0 ? NULL : call_slow(self, args, kwargs);
    }
    PyObject *several = PyObject_GetAttr(self->state, s_several_devices);
    if (several == NULL) return NULL;
    int many = PyObject_IsTrue(several);
    Py_DECREF(several);
    if (many) return many < 0 ? NULL : call_slow(self, args, kwargs);

    PyObject *uargs = PyTuple_New(n);
    if (uargs == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(args, i);
        PyTypeObject *t = Py_TYPE(x);
        PyObject *value;
        if (t == dipu_type) {
            value = PyObject_GetAttr(x, s_raw);
            if (value == NULL) { Py_DECREF(uargs); return NULL; }
        } else if (t == tensor_type && self->check_host) {
            Py_DECREF(uargs);  /* a host tensor where a device tensor belongs: the Python path says so */
            return call_slow(self, args, kwargs);
        } else {
            Py_INCREF(x);
            value = x;
        }
        PyTuple_SET_ITEM(uargs, i, value);
    }
    PyObject *device = PyObject_GetAttr(PyTuple_GET_ITEM(args, 0), s_device);
    if (device == NULL) { Py_DECREF(uargs); return NULL; }
    PyObject *out = PyObject_Call(self->op, uargs, NULL);
    Py_DECREF(uargs);
    PyObject *result = NULL;
    if (out == NULL) goto done;
    if (Py_TYPE(out) != tensor_type) {
        PyObject *pair[2] = {out, device};
        result = PyObject_Vectorcall(self->wrap, pair, 2, NULL);
        goto done;
    }
    if (!self->is_view) {
        PyObject *index = PyObject_GetAttr(device, s_index);
        if (index == NULL) goto done;
        PyObject *pair[2] = {out, index};
        PyObject *r = PyObject_Vectorcall(self->track, pair, 2, NULL);
        Py_DECREF(index);
        if (r == NULL) goto done;
        Py_DECREF(r);
    }
    result = wrap_one(self, out, device);
done:
    Py_XDECREF(out);
    Py_DECREF(device);
    return result;
}

static PyObject *fast_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"op", "slow", "track", "wrap", "state", "ranged", "is_view", "check_host", NULL};
    PyObject *op, *slow, *track, *wrap, *state, *ranged;
    int is_view, check_host;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOpp", names, &op, &slow, &track, &wrap, &state, &ranged, &is_view,
                                     &check_host))
        return NULL;
    if (dipu_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "torch_dipu._fastpath.setup() was not called");
        return NULL;
    }
    FastHandler *self = (FastHandler *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(op); self->op = op;
    Py_INCREF(slow); self->slow = slow;
    Py_INCREF(track); self->track = track;
    Py_INCREF(wrap); self->wrap = wrap;
    Py_INCREF(state); self->state = state;
    Py_INCREF(ranged); self->ranged = ranged;
    self->is_view = is_view;
    self->check_host = check_host;
    self->vectorcall = fast_call;
    return (PyObject *)self;
}

static int fast_traverse(FastHandler *self, visitproc visit, void *arg) {
    Py_VISIT(self->op); Py_VISIT(self->slow); Py_VISIT(self->track); Py_VISIT(self->wrap); Py_VISIT(self->state); Py_VISIT(self->ranged);
    return 0;
}

static int fast_clear(FastHandler *self) {
    Py_CLEAR(self->op); Py_CLEAR(self->slow); Py_CLEAR(self->track); Py_CLEAR(self->wrap); Py_CLEAR(self->state); Py_CLEAR(self->ranged);
    return 0;
}

static void fast_dealloc(FastHandler *self) {
    PyObject_GC_UnTrack(self);
    fast_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *fast_get_slow(FastHandler *self, void *closure) {
    Py_INCREF(self->slow);
    return self->slow;
}

static PyGetSetDef fast_getset[] = {
    {"slow", (getter)fast_get_slow, NULL, "the Python handler this one defers to", NULL},
    {NULL},
};

static PyTypeObject FastHandlerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torch_dipu._fastpath.FastHandler",
    .tp_doc = "A compiled handler for the common call of one ATen overload (see torch_dipu.dispatch).",
    .tp_basicsize = sizeof(FastHandler),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = fast_new,
    .tp_traverse = (traverseproc)fast_traverse,
    .tp_clear = (inquiry)fast_clear,
    .tp_dealloc = (destructor)fast_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(FastHandler, vectorcall),
    .tp_getset = fast_getset,
};

/* The dispatcher: DipuTensor.__torch_dispatch__(cls, func, types, args, kwargs) in C. */
typedef struct {
    PyObject_HEAD
    PyObject *handlers; /* id(overload) -> handler(args, kwargs) */
    PyObject *build;    /* build(func) -> handler, for an overload not in handlers */
    PyObject *graph_task; /* torch._C._current_graph_task_id: -1 outside a backward pass */
    PyObject *defer;    /* defer(func, exc) -> the answer for an exception raised inside a backward pass */
    vectorcallfunc vectorcall;
} Dispatcher;

static PyObject *dispatcher_call(PyObject *obj, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    Dispatcher *self = (Dispatcher *)obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 3 || nargs > 5 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "__torch_dispatch__(cls, func, types, args=(), kwargs=None)");
        return NULL;
    }
    PyObject *func = argv[1];
    PyObject *args = nargs > 3 ? argv[3] : NULL;
    PyObject *kwargs = nargs > 4 ? argv[4] : Py_None;
    PyObject *empty = NULL;
    if (args == NULL) {
        empty = PyTuple_New(0);
        if (empty == NULL) return NULL;
        args = empty;
    }
    PyObject *key = PyLong_FromVoidPtr(func);
    if (key == NULL) { Py_XDECREF(empty); return NULL; }
    PyObject *handler = PyDict_GetItemWithError(self->handlers, key); /* borrowed */
    Py_DECREF(key);
    PyObject *result = NULL;
    if (handler != NULL) {
        Py_INCREF(handler);
    } else {
        if (PyErr_Occurred()) goto done;
        handler = PyObject_CallOneArg(self->build, func);
        if (handler == NULL) goto done;
    }
    {
        PyObject *pair[2] = {args, kwargs};
        result = PyObject_Vectorcall(handler, pair, 2, NULL);
    }
    Py_DECREF(handler);
    if (result == NULL) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (type == NULL || !PyErr_GivenExceptionMatches(type, PyExc_Exception)) {
            PyErr_Restore(type, value, traceback); /* KeyboardInterrupt, SystemExit: never caught */
            goto done;
        }
        PyObject *task = PyObject_CallNoArgs(self->graph_task);
        long outside = task == NULL ? 1 : PyLong_AsLong(task) == -1;
        Py_XDECREF(task);
        if (outside) { /* not inside a backward pass: the error goes to the caller as it was raised */
            if (task == NULL) { Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(traceback); }
            else PyErr_Restore(type, value, traceback);
            goto done;
        }
        PyErr_NormalizeException(&type, &value, &traceback);
        if (traceback != NULL) PyException_SetTraceback(value, traceback);
        PyObject *pair[2] = {func, value};
        result = PyObject_Vectorcall(self->defer, pair, 2, NULL);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
    }
done:
    Py_XDECREF(empty);
    return result;
}

static PyObject *dispatcher_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"handlers", "build", "graph_task", "defer", NULL};
    PyObject *handlers, *build, *graph_task, *defer;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOO", names, &PyDict_Type, &handlers, &build, &graph_task,
                                     &defer))
        return NULL;
    Dispatcher *self = (Dispatcher *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(handlers); self->handlers = handlers;
    Py_INCREF(build); self->build = build;
    Py_INCREF(graph_task); self->graph_task = graph_task;
    Py_INCREF(defer); self->defer = defer;
    self->vectorcall = dispatcher_call;
    return (PyObject *)self;
}

static int dispatcher_traverse(Dispatcher *self, visitproc visit, void *arg) {
    Py_VISIT(self->handlers); Py_VISIT(self->build); Py_VISIT(self->graph_task); Py_VISIT(self->defer);
    return 0;
}

static int dispatcher_clear(Dispatcher *self) {
    Py_CLEAR(self->handlers); Py_CLEAR(self->build); Py_CLEAR(self->graph_task); Py_CLEAR(self->defer);
    return 0;
}

static void dispatcher_dealloc(Dispatcher *self) {
    PyObject_GC_UnTrack(self);
    dispatcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject DispatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torch_dipu._fastpath.Dispatcher",
    .tp_doc = "__torch_dispatch__ in C: the handler of id(func), built on a miss; an exception inside a backward pass "
               "goes to defer(func, exc).",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = dispatcher_new,
    .tp_traverse = (traverseproc)dispatcher_traverse,
    .tp_clear = (inquiry)dispatcher_clear,
    .tp_dealloc = (destructor)dispatcher_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Dispatcher, vectorcall),
};

static PyObject *setup(PyObject *module, PyObject *args) {
    PyObject *dipu, *tensor, *make, *layout, *view;
    if (!PyArg_ParseTuple(args, "O!O!OOO", &PyType_Type, &dipu, &PyType_Type, &tensor, &make, &layout, &view))
        return NULL;
    Py_INCREF(dipu); Py_XSETREF(dipu_type, (PyTypeObject *)dipu);
    Py_INCREF(tensor); Py_XSETREF(tensor_type, (PyTypeObject *)tensor);
    Py_INCREF(make); Py_XSETREF(make_wrapper, make);
    Py_INCREF(layout); Py_XSETREF(strided, layout);
    Py_INCREF(view); Py_XSETREF(make_view, view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(DipuTensor, torch.Tensor, Tensor._make_wrapper_subclass, torch.strided, make_view): the types and "
     "functions every FastHandler uses."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_fastpath", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastpath(void) {
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_raw, "_raw"); INTERN(s_device, "device"); INTERN(s_index, "index"); INTERN(s_shape, "shape");
    INTERN(s_dtype, "dtype"); INTERN(s_stride, "stride"); INTERN(s_storage_offset, "storage_offset");
    INTERN(s_is_contiguous, "is_contiguous"); INTERN(s_is_conj, "is_conj"); INTERN(s_is_neg, "is_neg");
    INTERN(s_several_devices, "several_devices");
#undef INTERN
    if (PyType_Ready(&FastHandlerType) < 0 || PyType_Ready(&DispatcherType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    Py_INCREF(&FastHandlerType);
    if (PyModule_AddObject(m, "FastHandler", (PyObject *)&FastHandlerType) < 0) {
        Py_DECREF(&FastHandlerType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&DispatcherType);
    if (PyModule_AddObject(m, "Dispatcher", (PyObject *)&DispatcherType) < 0) {
        Py_DECREF(&DispatcherType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
