"""Glue for handing numba-compiled kernels to XLA as typed FFI custom calls (CPU).

A numba ``cfunc`` with the signature ``void* handler(void* call_frame)`` is an XLA FFI handler
(``xla/ffi/api/c_api.h``, shipped with jaxlib): it reads its argument and result buffers from
the call frame at the C API's documented offsets, answers XLA's metadata query (the API version
whose layout it reads), and reports anything it does not expect through the API's own error
(``XLA_FFI_Error_Create``), so a jaxlib with a different frame fails with a message instead of
reading the wrong memory. :func:`register` registers such a handler once per process;
``jax.ffi.ffi_call`` then calls it from inside a jitted program with no Python and no copies.
:func:`prologue` is the start every handler shares. Kernels that share their work among threads
of their own (all but :mod:`.union_find`) start them from the handler with ``pthread_create``
and join them before it returns (:func:`share_out`), and are called through
:func:`threaded_handler`. Used by :mod:`.union_find`, :mod:`.transfer`, :mod:`.anneal`,
:mod:`.chain`, :mod:`.chromatic`, :mod:`.simulated` and :mod:`.swendsen_wang`.
"""

from __future__ import annotations

import ctypes
import functools
import os

import jax
import numba
import numpy as np
from llvmlite import ir
from numba import carray, types
from numba.extending import intrinsic

#: What a ``backend`` (``components``) argument of a compiled-kernel user may say.
BACKENDS = ("auto", "numba", "jax")
#: Threads of one threaded kernel call at most (the calling thread included).
MAX_THREADS = max(1, min(os.cpu_count() or 1, 8))


def available():
    """Whether compiled kernels can be used: this JAX has the typed FFI (``jax.ffi.ffi_call``)
    and runs on the CPU (the kernels are CPU code; on an accelerator the JAX paths run)."""
    return hasattr(jax, "ffi") and hasattr(jax.ffi, "ffi_call") and jax.default_backend() == "cpu"


def resolve_backend(backend, *, parameter="backend", usable=available) -> str:
    """``"numba"`` or ``"jax"``: where a kernel asked for as ``backend`` runs. ``"auto"`` is
    ``"numba"`` where ``usable()`` (default :func:`available`; a caller passes one that also
    registers its kernel, and warns and returns False if XLA refuses it), else ``"jax"``;
    ``"numba"`` where the compiled kernels cannot run raises ``ValueError`` naming
    ``parameter``, JAX's platform and the alternative; ``"jax"`` is itself. The one place the
    policy is written; the compiled-kernel users call it."""
    from .._validation import check_choice

    check_choice(parameter, backend, BACKENDS)
    if backend == "auto":
        return "numba" if usable() else "jax"
    if backend == "numba" and not available():
        raise ValueError(f"{parameter}='numba' runs compiled CPU kernels; JAX's default backend "
                         f"is {jax.default_backend()!r}: use {parameter}='jax' (or 'auto')")
    return backend


# Offsets in 8-byte words, from xla/ffi/api/c_api.h (64-bit platforms):
#   XLA_FFI_CallFrame: struct_size 0, extension_start 1, api 2, ctx 3, stage 4,
#     args = XLA_FFI_Args {struct_size 5, extension_start 6, size 7, types 8, args 9},
#     rets = XLA_FFI_Rets {struct_size 10, extension_start 11, size 12, types 13, rets 14}
#   XLA_FFI_Buffer: struct_size 0, extension_start 1, dtype 2, data 3, rank 4, dims 5
#   XLA_FFI_Api: ..., XLA_FFI_Error_Create at word 6
#   XLA_FFI_Metadata_Extension: {struct_size 0, type 1, next 2}, metadata 3
#   XLA_FFI_Metadata: struct_size 0, api_version {struct_size 1, extension_start 2, major and
#     minor 3}, traits 4, state_type_id 5
FRAME_WORDS = 15  # the call frame's words read here (through rets.rets)
_ARGS_SIZE = _RETS_SIZE = 40  # bytes of XLA_FFI_Args / XLA_FFI_Rets
_BUFFER_SIZE = 48  # bytes of XLA_FFI_Buffer
_METADATA_EXTENSION = 1  # XLA_FFI_Extension_Metadata
_API_VERSION = (0, 1)  # the C API version whose layout this module reads
PRED, S32, U32, F32, F64 = 1, 4, 8, 11, 12  # XLA_FFI_DataType
_INVALID_ARGUMENT = 3  # XLA_FFI_Error_Code

# XLA_FFI_Error_Create_Args {struct_size, extension_start, message, errc}, filled once; the
# handlers hold their address, ERROR_ARGS (the arrays live as long as this module).
_MESSAGE = np.frombuffer(
    b"isingattn custom call: the XLA FFI call frame or its buffers do not have the layout this "
    b"isingattn version reads (XLA FFI C API 0.x, 64-bit); use the JAX path of the caller "
    b"(components='jax', or backend='jax')\0", np.uint8)
_ERROR_ARGS = np.array([28, 0, _MESSAGE.ctypes.data, _INVALID_ARGUMENT], np.int64)
ERROR_ARGS = int(_ERROR_ARGS.ctypes.data)


@intrinsic
def ptr(typingctx, address):
    """An int64 address as a void pointer."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))
    return types.voidptr(types.int64), codegen

@intrinsic
def _call(typingctx, function, argument):
    """Call the C function ``void* f(void*)`` at address ``function`` with ``argument``."""
    def codegen(context, builder, signature, args):
        vp = context.get_value_type(types.voidptr)
        f = builder.inttoptr(args[0], ir.FunctionType(vp, [vp]).as_pointer())
        return builder.call(f, [builder.inttoptr(args[1], vp)])
    return types.voidptr(types.int64, types.int64), codegen

@numba.njit(inline="always")
def words(address, n):
    return carray(ptr(address), (n,), dtype=np.int64)

@numba.njit(inline="always")
def fail(frame, error_args):
    """XLA's error for this call (``XLA_FFI_Error_Create`` with the arguments at the address
    ``error_args``): what a handler returns for a frame or buffer it does not expect."""
    return _call(words(frame[2], 7)[6], error_args)

@numba.njit(inline="always")
def error(frame):
    """:func:`fail` with this process's error arguments (:data:`ERROR_ARGS`)."""
    return fail(frame, ERROR_ARGS)

@numba.njit(inline="always")
def metadata(frame):
    """Answer XLA's metadata query (API version, no traits); True if this was one."""
    if frame[1] == 0:
        return False
    ext = words(frame[1], 4)
    if (ext[1] & 0xFFFFFFFF) != _METADATA_EXTENSION:
        return False
    md = words(ext[3], 5)
    md[1] = 24  # XLA_FFI_Api_Version: struct_size, no extensions, major | minor << 32
    md[2] = 0
    md[3] = _API_VERSION[0] | (_API_VERSION[1] << 32)
    md[4] = 0  # traits (uint32; the rest of the word is padding)
    if md[0] >= 48:
        words(ext[3], 6)[5] = 0  # state_type_id: XLA_FFI_UNKNOWN_TYPE_ID
    return True

@numba.njit(inline="always")
def frame_ok(frame, nargs, nrets=1):
    return (frame[0] >= 8 * FRAME_WORDS and frame[5] >= _ARGS_SIZE and frame[7] == nargs
            and frame[10] >= _RETS_SIZE and frame[12] == nrets)

@numba.njit(inline="always")
def prologue(frame_ptr, nargs, error_args, nrets=1):
    """What every handler does first: ``(frame, done, answer)``, ``frame`` the call frame's
    first ``FRAME_WORDS`` words. ``done``: the handler returns ``answer`` at once, null after
    answering XLA's metadata query, or the API's error (:func:`fail` with ``error_args``) for a
    frame not of the layout read here with ``nargs`` arguments and ``nrets`` results."""
    frame = carray(frame_ptr, (FRAME_WORDS,), dtype=np.int64)
    if metadata(frame):
        return frame, True, ptr(0)
    if not frame_ok(frame, nargs, nrets):
        return frame, True, fail(frame, error_args)
    return frame, False, ptr(0)

@numba.njit(inline="always")
def arguments(frame, nargs):
    """The addresses of the call's ``nargs`` argument buffers (XLA_FFI_Buffer)."""
    return words(frame[9], nargs)

@numba.njit(inline="always")
def result(frame):
    """The address of the call's one result buffer (XLA_FFI_Buffer)."""
    return words(frame[14], 1)[0]

@numba.njit(inline="always")
def results(frame, nrets):
    """The addresses of the call's ``nrets`` result buffers (XLA_FFI_Buffer)."""
    return words(frame[14], nrets)

@numba.njit(inline="always")
def buffer(address, dtype, min_rank):
    """``(data, rank, dims)`` of an XLA_FFI_Buffer, or rank -1 if it is not as expected."""
    b = words(address, 6)
    if b[0] < _BUFFER_SIZE or (b[2] & 0xFFFFFFFF) != dtype or b[4] < min_rank:
        return b[3], -1, b[5]
    return b[3], b[4], b[5]

@numba.njit(inline="always")
def dtype_of(address):
    """The XLA_FFI_DataType of an XLA_FFI_Buffer."""
    return words(address, 6)[2] & 0xFFFFFFFF

@numba.njit(inline="always")
def lead(dims, rank, trailing):
    m = 1
    for k in range(rank - trailing):
        m *= dims[k]
    return m


@functools.cache
def register(target, compile_handler):
    """Compile a handler and register it with XLA under ``target``, once per process.

    ``compile_handler()`` returns the numba ``cfunc``, or a tuple of it and the other functions
    it calls by address (kept alive here). Numba compiles a ``cfunc`` where it is defined, hence
    in ``compile_handler``, on first use, not at import."""
    capsule = ctypes.pythonapi.PyCapsule_New
    capsule.restype = ctypes.py_object
    capsule.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
    made = compile_handler()  # the handler, or a tuple of it and what it calls by address
    handler = made[0] if isinstance(made, tuple) else made
    jax.ffi.register_ffi_target(target, capsule(handler.address, None, None), platform="cpu")
    return made  # kept alive by the cache


@intrinsic
def _pthread_create(typingctx, create, tid, start, arg):
    """``pthread_create(tid, NULL, start, arg)`` through the function's address."""
    def codegen(context, builder, signature, args):
        vp = context.get_value_type(types.voidptr)
        fn = ir.FunctionType(ir.IntType(32), [vp, vp, vp, vp])
        f = builder.inttoptr(args[0], fn.as_pointer())
        return builder.call(f, [builder.inttoptr(args[1], vp), ir.Constant(vp, None),
                                builder.inttoptr(args[2], vp), builder.inttoptr(args[3], vp)])
    return types.int32(types.int64, types.int64, types.int64, types.int64), codegen

@intrinsic
def _pthread_join(typingctx, join, tid):
    """``pthread_join(tid, NULL)`` through the function's address."""
    def codegen(context, builder, signature, args):
        vp = context.get_value_type(types.voidptr)
        fn = ir.FunctionType(ir.IntType(32), [ir.IntType(64), vp])
        f = builder.inttoptr(args[0], fn.as_pointer())
        return builder.call(f, [args[1], ir.Constant(vp, None)])
    return types.int32(types.int64, types.int64), codegen

@numba.njit(inline="always")
def share_out(run, jobs, T, create, join, worker):
    """Run the rows ``jobs[0 .. T)`` (one share of the work each, int64 words): rows 1 onwards on
    threads started with ``pthread_create`` (``create``) at ``worker``, a ``cfunc`` that runs
    the row at its argument's address; row 0 on the calling thread with ``run``; then join them
    (``join``). A row whose thread did not start runs on the calling thread."""
    row = 8 * jobs.shape[1]
    tids = np.zeros(max(T, 1), np.int64)
    started = np.zeros(max(T, 1), np.int64)
    for t in range(1, T):
        rc = _pthread_create(create, tids.ctypes.data + 8 * t, worker, jobs.ctypes.data + row * t)
        started[t] = rc == 0
    if T > 0:
        run(jobs[0])
    for t in range(1, T):
        if started[t]:
            _pthread_join(join, tids[t])
        else:
            run(jobs[t])

@numba.njit(inline="always")
def share_units(run, head, units, T, create, join, worker):
    """:func:`share_out` of ``units`` units of work among ``T`` threads: row ``t`` of the job
    table is ``head`` (int64 words: the dtype, shapes and buffer addresses every share reads)
    followed by its units ``[units t / T, units (t + 1) / T)``."""
    n = head.shape[0]
    jobs = np.empty((max(T, 1), n + 2), np.int64)
    for t in range(T):
        for i in range(n):
            jobs[t, i] = head[i]
        jobs[t, n] = units * t // T
        jobs[t, n + 1] = units * (t + 1) // T
    share_out(run, jobs, T, create, join, worker)

#: Signature of a threaded kernel's cached handle: ``(frame, pthread_create, pthread_join,
#: worker, error_args, threads) -> void*``.
HANDLE_SIG = types.voidptr(types.voidptr, *[types.int64] * 5)

@intrinsic
def _call_handle(typingctx, handle, frame, create, join, worker, error_args, threads):
    """Call a handle of :data:`HANDLE_SIG` through its address: a call of the dispatcher would
    link its code into the caller, whose compilation would then optimize all of it again."""
    def codegen(context, builder, signature, args):
        vp = context.get_value_type(types.voidptr)
        fn = ir.FunctionType(vp, [vp] + [ir.IntType(64)] * 5)
        f = builder.inttoptr(args[0], fn.as_pointer())
        return builder.call(f, list(args[1:]))
    return HANDLE_SIG.return_type(types.int64, *HANDLE_SIG.args), codegen


def threaded_handler(handle, worker, threads=None):
    """The XLA handler of a threaded kernel: a thin ``cfunc`` that passes this process's
    addresses (``pthread_create``, ``pthread_join``, ``worker``'s, the error arguments) and the
    thread count (default :data:`MAX_THREADS`) to ``handle``, a disk-cached ``cfunc`` of
    :data:`HANDLE_SIG`, so that only these few instructions are compiled per process. Returns
    the handler with the functions whose addresses it holds (for :func:`register` to keep)."""
    libc = ctypes.CDLL(None)
    create = ctypes.cast(libc.pthread_create, ctypes.c_void_p).value
    join = ctypes.cast(libc.pthread_join, ctypes.c_void_p).value
    worker_address = worker.address
    handle_address = handle.address
    error_args = ERROR_ARGS
    threads = MAX_THREADS if threads is None else int(threads)

    @numba.cfunc(types.voidptr(types.voidptr), nopython=True)
    def _handler(frame_ptr):
        return _call_handle(handle_address, frame_ptr, create, join, worker_address, error_args,
                            threads)

    return _handler, handle, worker


@functools.cache
def register_threaded(target, handle, worker):
    """:func:`register` the :func:`threaded_handler` of ``handle`` and ``worker`` under
    ``target``, once per process: what a threaded kernel's module calls before its first use."""
    return register(target, functools.partial(threaded_handler, handle, worker))
