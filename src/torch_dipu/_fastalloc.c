/* The caching allocator's common request in C (optional; torch_dipu.allocator keeps the Python path).

A StorageTracker stands in for three methods of one CachingAllocator on the hot path of every kernel output:
``track(raw, index)`` (give a new storage its block), the weak-reference callback of a storage that died, and
``_reclaim`` (free the blocks of the storages that died). It serves the request that repeats most, a block held by
BF for the rounded size with no memory checker watching, and hands every other
request to the allocator's Python ``malloc``, which stays the definition of an allocation. The allocator's objects
(Block, Stat, the weak reference) keep their Python classes: their ``__slots__`` are read and written at the
offsets their member descriptors give, so the Python code and this one share every figure.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>

static PyObject *s_untyped_storage, *s_nbytes, *s_observer, *s_on_free, *s_held, *s_allocated_bytes,
    *s_requested_bytes, *s_allocation, *s_devices, *s_live, *s_dead, *s_lock, *s_malloc, *s_release_block,
    *s_hold, *s_popleft, *s_append, *s_acquire, *s_release;
static PyObject *one, *zero;

/* Offsets of the __slots__ used here. */
typedef struct {
    Py_ssize_t device, size, requested, held, allocated; /* Block */
    Py_ssize_t current, peak, freed;                    /* Stat */
    Py_ssize_t block, key;                              /* _StorageRef */
} Slots;

typedef struct {
    PyObject_HEAD
    PyObject *allocator;
    PyObject *live;          /* id(storage) -> its weak reference */
    PyObject *dead;          /* blocks of dead storages (a deque) */
    PyObject *popleft, *append, *acquire, *release; /* bound methods of the deque and the lock */
    PyObject *devices;       /* DeviceMemory per device index (a list) */
    PyObject *malloc;        /* allocator.malloc: every request this one does not serve */
    PyObject *release_block; /* allocator._release_block (BS, RAW), or None */
    PyObject *died;          /* this tracker's died method, bound: the callback of every weak reference */
    PyObject *cache;         /* per device index: (DeviceMemory, held, allocated_bytes, requested_bytes, allocation) */
    PyTypeObject *block_type, *stat_type, *ref_type;
    Slots slots;
    int hold;                /* BF: a freed block is held for the next request of its size */
    vectorcallfunc vectorcall;
} StorageTracker;

#define SLOT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))

static int slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset) {
    PyObject *descr = PyDict_GetItemString(type->tp_dict, name); /* borrowed */
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
        ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "StorageTracker: %s.%s is not a __slots__ attribute", type->tp_name, name);
        return -1;
    }
    *offset = ((PyMemberDescrObject *)descr)->d_member->offset;
    return 0;
}

/* A slot's value (borrowed); NULL with AttributeError when it was never set. */
static PyObject *get_slot(PyObject *obj, Py_ssize_t offset, const char *name) {
    PyObject *value = SLOT(obj, offset);
    if (value == NULL) PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute '%s'", Py_TYPE(obj)->tp_name, name);
    return value;
}

/* Set a slot, taking a new reference to value. */
static void set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value) {
    Py_INCREF(value);
    Py_XSETREF(SLOT(obj, offset), value);
}

/* stat.current += n; stat.peak = max(stat.peak, stat.current) */
static int stat_add(StorageTracker *self, PyObject *stat, PyObject *n) {
    if (!Py_IS_TYPE(stat, self->stat_type)) {
        PyErr_SetString(PyExc_TypeError, "StorageTracker: a device statistic is not a Stat");
        return -1;
    }
    PyObject *current = get_slot(stat, self->slots.current, "current");
    if (current == NULL) return -1;
    PyObject *sum = PyNumber_Add(current, n);
    if (sum == NULL) return -1;
    Py_XSETREF(SLOT(stat, self->slots.current), sum);
    PyObject *peak = get_slot(stat, self->slots.peak, "peak");
    if (peak == NULL) return -1;
    int above = PyObject_RichCompareBool(sum, peak, Py_GT);
    if (above < 0) return -1;
    if (above) set_slot(stat, self->slots.peak, sum);
    return 0;
}

/* stat.current -= n; stat.freed += n */
static int stat_sub(StorageTracker *self, PyObject *stat, PyObject *n) {
    if (!Py_IS_TYPE(stat, self->stat_type)) {
        PyErr_SetString(PyExc_TypeError, "StorageTracker: a device statistic is not a Stat");
        return -1;
    }
    PyObject *current = get_slot(stat, self->slots.current, "current");
    PyObject *freed = current == NULL ? NULL : get_slot(stat, self->slots.freed, "freed");
    if (freed == NULL) return -1;
    PyObject *less = PyNumber_Subtract(current, n);
    if (less == NULL) return -1;
    PyObject *more = PyNumber_Add(freed, n);
    if (more == NULL) { Py_DECREF(less); return -1; }
    Py_XSETREF(SLOT(stat, self->slots.current), less);
    Py_XSETREF(SLOT(stat, self->slots.freed), more);
    return 0;
}

/* The cached (DeviceMemory, held, allocated_bytes, requested_bytes, allocation) of a device index (borrowed). */
static PyObject *device_entry(StorageTracker *self, Py_ssize_t index) {
    if (index < 0 || index >= PyList_GET_SIZE(self->devices)) {
        PyErr_Format(PyExc_IndexError, "dipu allocator: no device %zd", index);
        return NULL;
    }
    PyObject *device = PyList_GET_ITEM(self->devices, index);
    while (PyList_GET_SIZE(self->cache) <= index)
        if (PyList_Append(self->cache, Py_None) < 0) return NULL;
    PyObject *entry = PyList_GET_ITEM(self->cache, index);
    if (entry != Py_None && PyTuple_GET_ITEM(entry, 0) == device) return entry;
    PyObject *held = PyObject_GetAttr(device, s_held);
    PyObject *a = held == NULL ? NULL : PyObject_GetAttr(device, s_allocated_bytes);
    PyObject *r = a == NULL ? NULL : PyObject_GetAttr(device, s_requested_bytes);
    PyObject *n = r == NULL ? NULL : PyObject_GetAttr(device, s_allocation);
    if (n == NULL || !PyDict_Check(held)) {
        if (n != NULL) PyErr_SetString(PyExc_TypeError, "StorageTracker: DeviceMemory.held is not a dict");
        Py_XDECREF(held); Py_XDECREF(a); Py_XDECREF(r); Py_XDECREF(n);
        return NULL;
    }
    entry = PyTuple_Pack(5, device, held, a, r, n);
    Py_DECREF(held); Py_DECREF(a); Py_DECREF(r); Py_DECREF(n);
    if (entry == NULL || PyList_SetItem(self->cache, index, entry) < 0) return NULL; /* steals entry */
    return entry;
}

/* Free the blocks of dead storages, as CachingAllocator._reclaim (the caller holds the allocator's lock). */
static int reclaim(StorageTracker *self) {
    for (;;) {
        Py_ssize_t waiting = PyObject_Size(self->dead);
        if (waiting <= 0) return (int)waiting;
        PyObject *block = PyObject_CallNoArgs(self->popleft);
        if (block == NULL) return -1;
        int ok = -1;
        if (!Py_IS_TYPE(block, self->block_type)) {
            PyErr_SetString(PyExc_TypeError, "StorageTracker: a dead storage's block is not a Block");
            goto next;
        }
        PyObject *index = get_slot(block, self->slots.device, "device");
        PyObject *size = index == NULL ? NULL : get_slot(block, self->slots.size, "size");
        PyObject *requested = size == NULL ? NULL : get_slot(block, self->slots.requested, "requested");
        if (requested == NULL) goto next;
        Py_ssize_t i = PyLong_AsSsize_t(index);
        if (i == -1 && PyErr_Occurred()) goto next;
        PyObject *entry = device_entry(self, i);
        if (entry == NULL) goto next;
        Py_INCREF(entry);
        if (stat_sub(self, PyTuple_GET_ITEM(entry, 2), size) < 0 ||
            stat_sub(self, PyTuple_GET_ITEM(entry, 3), requested) < 0 ||
            stat_sub(self, PyTuple_GET_ITEM(entry, 4), one) < 0) {
            Py_DECREF(entry);
            goto next;
        }
        if (self->hold) { /* held for the next request of its size */
            set_slot(block, self->slots.held, Py_True);
            PyObject *held = PyTuple_GET_ITEM(entry, 1);
            PyObject *list = PyDict_GetItemWithError(held, size); /* borrowed */
            if (list != NULL) {
                ok = PyList_Append(list, block);
            } else if (!PyErr_Occurred()) {
                list = PyList_New(1);
                if (list != NULL) {
                    Py_INCREF(block);
                    PyList_SET_ITEM(list, 0, block);
                    ok = PyDict_SetItem(held, size, list);
                    Py_DECREF(list);
                }
            }
        } else {
            set_slot(block, self->slots.allocated, Py_False);
            set_slot(block, self->slots.requested, zero);
            PyObject *argv[2] = {PyTuple_GET_ITEM(entry, 0), block};
            PyObject *r = PyObject_Vectorcall(self->release_block, argv, 2, NULL);
            ok = r == NULL ? -1 : 0;
            Py_XDECREF(r);
        }
        Py_DECREF(entry);
    next:
        Py_DECREF(block);
        if (ok < 0) return -1;
    }
}

/* A held block of the rounded size, accounted, or NULL: with an exception set on an error, without one when the
   request is not the common one (the caller asks the allocator's malloc). */
static PyObject *take_held(StorageTracker *self, PyObject *index, Py_ssize_t nbytes, PyObject *nbytes_obj) {
    if (!self->hold) return NULL;
    PyObject *observer = PyObject_GetAttr(self->allocator, s_observer);
    if (observer == NULL) return NULL;
    int watched = observer != Py_None;
    Py_DECREF(observer);
    if (watched) return NULL; /* the memory checker hears of every block: the Python path tells it */
    Py_ssize_t i = PyLong_AsSsize_t(index);
    if (i == -1 && PyErr_Occurred()) return NULL;
    PyObject *entry = device_entry(self, i);
    if (entry == NULL) return NULL;
    PyObject *got = PyObject_CallNoArgs(self->acquire); /* waits, as the Python path does, for another thread */
    if (got == NULL) return NULL;
    Py_DECREF(got);
    Py_INCREF(entry);
    PyObject *block = NULL, *size = NULL;
    if (reclaim(self) < 0) goto done;
    size = PyLong_FromSsize_t((nbytes + 511) & ~(Py_ssize_t)511);
    if (size == NULL) goto done;
    PyObject *list = PyDict_GetItemWithError(PyTuple_GET_ITEM(entry, 1), size); /* borrowed */
    if (list == NULL || !PyList_Check(list) || PyList_GET_SIZE(list) == 0) goto done;
    Py_ssize_t last = PyList_GET_SIZE(list) - 1;
    block = PyList_GET_ITEM(list, last);
    Py_INCREF(block);
    if (PyList_SetSlice(list, last, last + 1, NULL) < 0 || !Py_IS_TYPE(block, self->block_type)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "StorageTracker: a held block is not a Block");
        Py_CLEAR(block);
        goto done;
    }
    set_slot(block, self->slots.held, Py_False);
    set_slot(block, self->slots.requested, nbytes_obj);
    PyObject *block_size = get_slot(block, self->slots.size, "size");
    if (block_size == NULL || stat_add(self, PyTuple_GET_ITEM(entry, 2), block_size) < 0 ||
        stat_add(self, PyTuple_GET_ITEM(entry, 3), nbytes_obj) < 0 ||
        stat_add(self, PyTuple_GET_ITEM(entry, 4), one) < 0)
        Py_CLEAR(block);
done:
    Py_XDECREF(size);
    Py_DECREF(entry);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *r = PyObject_CallNoArgs(self->release);
    if (r == NULL) {
        Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(traceback);
        Py_XDECREF(block);
        return NULL;
    }
    Py_DECREF(r);
    PyErr_Restore(type, value, traceback);
    return block;
}

/* track(raw, index): give the storage of raw (a kernel's output on device index) a block unless it has one. */
static PyObject *tracker_call(PyObject *obj, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    StorageTracker *self = (StorageTracker *)obj;
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "track(raw, index)");
        return NULL;
    }
    PyObject *storage = PyObject_CallMethodNoArgs(argv[0], s_untyped_storage);
    if (storage == NULL) return NULL;
    PyObject *result = NULL, *key = NULL, *size = NULL, *block = NULL, *ref = NULL;
    key = PyLong_FromVoidPtr(storage); /* id(storage) */
    if (key == NULL) goto done;
    int known = PyDict_Contains(self->live, key);
    if (known < 0) goto done;
    if (known) { result = Py_NewRef(Py_None); goto done; }
    size = PyObject_CallMethodNoArgs(storage, s_nbytes);
    if (size == NULL) goto done;
    Py_ssize_t nbytes = PyLong_AsSsize_t(size);
    if (nbytes == -1 && PyErr_Occurred()) goto done;
    if (nbytes == 0) { result = Py_NewRef(Py_None); goto done; }
    block = take_held(self, argv[1], nbytes, size);
    if (block == NULL) {
        if (PyErr_Occurred()) goto done;
        PyObject *args[2] = {argv[1], size};
        block = PyObject_Vectorcall(self->malloc, args, 2, NULL);
        if (block == NULL) goto done;
    }
    {
        PyObject *args[2] = {storage, self->died};
        ref = PyObject_Vectorcall((PyObject *)self->ref_type, args, 2, NULL);
    }
    if (ref == NULL || !Py_IS_TYPE(ref, self->ref_type)) {
        if (ref != NULL) PyErr_SetString(PyExc_TypeError, "StorageTracker: the weak reference type changed");
        goto done; /* the block stays allocated, as when the Python path fails here */
    }
    set_slot(ref, self->slots.block, block);
    set_slot(ref, self->slots.key, key);
    if (PyDict_SetItem(self->live, key, ref) < 0) goto done;
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(ref);
    Py_XDECREF(block);
    Py_XDECREF(size);
    Py_XDECREF(key);
    Py_DECREF(storage);
    return result;
}

/* died(ref): the weak-reference callback of a storage, as CachingAllocator._storage_died. */
static PyObject *tracker_died(StorageTracker *self, PyObject *ref) {
    if (!Py_IS_TYPE(ref, self->ref_type)) {
        PyErr_SetString(PyExc_TypeError, "StorageTracker.died: not a storage's weak reference");
        return NULL;
    }
    PyObject *key = get_slot(ref, self->slots.key, "key");
    PyObject *block = key == NULL ? NULL : get_slot(ref, self->slots.block, "block");
    if (block == NULL) return NULL;
    Py_INCREF(key);
    Py_INCREF(block);
    PyObject *result = NULL;
    PyObject *current = PyDict_GetItemWithError(self->live, key); /* borrowed */
    if (current != ref) {
        if (!PyErr_Occurred()) result = Py_NewRef(Py_None);
        goto done;
    }
    if (PyDict_DelItem(self->live, key) < 0) goto done;
    PyObject *observer = PyObject_GetAttr(self->allocator, s_observer);
    if (observer == NULL) goto done;
    if (observer != Py_None) { /* the memory checker hears of the free where it happened */
        PyObject *r = PyObject_CallMethodOneArg(observer, s_on_free, block);
        Py_DECREF(observer);
        if (r == NULL) goto done;
        Py_DECREF(r);
    } else {
        Py_DECREF(observer);
    }
    result = PyObject_CallOneArg(self->append, block);
done:
    Py_DECREF(block);
    Py_DECREF(key);
    return result;
}

static PyObject *tracker_reclaim(StorageTracker *self, PyObject *unused) {
    if (reclaim(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *tracker_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"allocator", "block_type", "stat_type", "ref_type", NULL};
    PyObject *allocator;
    PyTypeObject *block_type, *stat_type, *ref_type;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!O!O!", names, &allocator, &PyType_Type, &block_type, &PyType_Type,
                                     &stat_type, &PyType_Type, &ref_type))
        return NULL;
    StorageTracker *self = (StorageTracker *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(allocator); self->allocator = allocator;
    Py_INCREF(block_type); self->block_type = block_type;
    Py_INCREF(stat_type); self->stat_type = stat_type;
    Py_INCREF(ref_type); self->ref_type = ref_type;
    self->vectorcall = tracker_call;
    PyObject *lock = NULL, *hold = NULL;
    if (slot_offset(block_type, "device", &self->slots.device) < 0 ||
        slot_offset(block_type, "size", &self->slots.size) < 0 ||
        slot_offset(block_type, "requested", &self->slots.requested) < 0 ||
        slot_offset(block_type, "held", &self->slots.held) < 0 ||
        slot_offset(block_type, "allocated", &self->slots.allocated) < 0 ||
        slot_offset(stat_type, "current", &self->slots.current) < 0 ||
        slot_offset(stat_type, "peak", &self->slots.peak) < 0 ||
        slot_offset(stat_type, "freed", &self->slots.freed) < 0 ||
        slot_offset(ref_type, "block", &self->slots.block) < 0 ||
        slot_offset(ref_type, "key", &self->slots.key) < 0)
        goto fail;
    if ((self->live = PyObject_GetAttr(allocator, s_live)) == NULL || !PyDict_Check(self->live) ||
        (self->dead = PyObject_GetAttr(allocator, s_dead)) == NULL ||
        (self->popleft = PyObject_GetAttr(self->dead, s_popleft)) == NULL ||
        (self->append = PyObject_GetAttr(self->dead, s_append)) == NULL ||
        (lock = PyObject_GetAttr(allocator, s_lock)) == NULL ||
        (self->acquire = PyObject_GetAttr(lock, s_acquire)) == NULL ||
        (self->release = PyObject_GetAttr(lock, s_release)) == NULL ||
        (self->devices = PyObject_GetAttr(allocator, s_devices)) == NULL || !PyList_Check(self->devices) ||
        (self->malloc = PyObject_GetAttr(allocator, s_malloc)) == NULL ||
        (self->release_block = PyObject_GetAttr(allocator, s_release_block)) == NULL ||
        (hold = PyObject_GetAttr(allocator, s_hold)) == NULL ||
        (self->died = PyObject_GetAttrString((PyObject *)self, "died")) == NULL ||
        (self->cache = PyList_New(0)) == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "StorageTracker: not a CachingAllocator");
        goto fail;
    }
    self->hold = PyObject_IsTrue(hold);
    if (self->hold < 0) goto fail;
    Py_DECREF(hold);
    Py_DECREF(lock);
    return (PyObject *)self;
fail:
    Py_XDECREF(hold);
    Py_XDECREF(lock);
    Py_DECREF(self);
    return NULL;
}

static int tracker_traverse(StorageTracker *self, visitproc visit, void *arg) {
    Py_VISIT(self->allocator); Py_VISIT(self->live); Py_VISIT(self->dead); Py_VISIT(self->popleft);
    Py_VISIT(self->append); Py_VISIT(self->acquire); Py_VISIT(self->release); Py_VISIT(self->devices);
    Py_VISIT(self->malloc); Py_VISIT(self->release_block); Py_VISIT(self->died); Py_VISIT(self->cache);
    Py_VISIT(self->block_type); Py_VISIT(self->stat_type); Py_VISIT(self->ref_type);
    return 0;
}

static int tracker_clear(StorageTracker *self) {
    Py_CLEAR(self->allocator); Py_CLEAR(self->live); Py_CLEAR(self->dead); Py_CLEAR(self->popleft);
    Py_CLEAR(self->append); Py_CLEAR(self->acquire); Py_CLEAR(self->release); Py_CLEAR(self->devices);
    Py_CLEAR(self->malloc); Py_CLEAR(self->release_block); Py_CLEAR(self->died); Py_CLEAR(self->cache);
    Py_CLEAR(self->block_type); Py_CLEAR(self->stat_type); Py_CLEAR(self->ref_type);
    return 0;
}

static void tracker_dealloc(StorageTracker *self) {
    PyObject_GC_UnTrack(self);
    tracker_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef tracker_methods[] = {
    {"died", (PyCFunction)tracker_died, METH_O, "died(ref): the weak-reference callback of a storage"},
    {"reclaim", (PyCFunction)tracker_reclaim, METH_NOARGS,
     "reclaim(): free the blocks of dead storages (the caller holds the allocator's lock)"},
    {NULL},
};

static PyTypeObject StorageTrackerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torch_dipu._fastalloc.StorageTracker",
    .tp_doc = "StorageTracker(allocator, Block, Stat, StorageRef): track(raw, index), died(ref) and reclaim() of a "
              "CachingAllocator, the common request (a held block of the rounded size) served in C.",
    .tp_basicsize = sizeof(StorageTracker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = tracker_new,
    .tp_traverse = (traverseproc)tracker_traverse,
    .tp_clear = (inquiry)tracker_clear,
    .tp_dealloc = (destructor)tracker_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(StorageTracker, vectorcall),
    .tp_methods = tracker_methods,
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_fastalloc", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__fastalloc(void) {
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_untyped_storage, "untyped_storage"); INTERN(s_nbytes, "nbytes"); INTERN(s_observer, "observer");
    INTERN(s_on_free, "on_free"); INTERN(s_held, "held"); INTERN(s_allocated_bytes, "allocated_bytes");
    INTERN(s_requested_bytes, "requested_bytes"); INTERN(s_allocation, "allocation"); INTERN(s_devices, "devices");
    INTERN(s_live, "_live"); INTERN(s_dead, "_dead"); INTERN(s_lock, "_lock"); INTERN(s_malloc, "malloc");
    INTERN(s_release_block, "_release_block"); INTERN(s_hold, "_hold"); INTERN(s_popleft, "popleft");
    INTERN(s_append, "append"); INTERN(s_acquire, "acquire"); INTERN(s_release, "release");
#undef INTERN
    if ((one = PyLong_FromLong(1)) == NULL || (zero = PyLong_FromLong(0)) == NULL) return NULL;
    if (PyType_Ready(&StorageTrackerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    Py_INCREF(&StorageTrackerType);
    if (PyModule_AddObject(m, "StorageTracker", (PyObject *)&StorageTrackerType) < 0) {
        Py_DECREF(&StorageTrackerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
